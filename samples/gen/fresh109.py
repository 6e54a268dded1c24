"""samples/fresh109: a 109th batch of programs as a user writes them, on the
theme of conditional computation with static shapes under sharding in current
JAX / optax (mixture-of-depths routers picking the top-k tokens of a sequence,
early-exit heads with confidence thresholds, ToMe token merging by bipartite
soft matching and segment_sum, token dropping with a global capacity chosen by
sorting, adaptive computation time with halting probabilities and a remainder
in a scan and in a while loop, stochastic depth with per-example masks drawn
from a key and rescaled, k-winners-take-all / TopK sparse autoencoders, and
dynamic block-sparse attention choosing key blocks by pooled scores), none of
them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families (bugs in brackets):
 1. mixture-of-depths block, sequence over sp4: router scores all_gather'd
    along the sequence, the k-th largest per row as a threshold, the block
    run on every local token and added only where selected, gated by the
    sigmoid of the router score. [top-k of the local scores with k / sp;
    threshold at the (k+1)-th score; strict > (drops the k-th token)]
 2. mixture-of-depths training step, dp2 x tp4, check_vma=True: top_k +
    take_along_axis + scatter-add of the selected tokens, MLP column / row
    parallel over tp with a psum, loss pmean'd over dp, jax.value_and_grad,
    optax.adam. [loss psum'd over dp (gradients twice); row-parallel output
    not psum'd and the loss pmean'd over (dp, tp)]
 3. early-exit inference, batch over dp2, exit heads' vocabulary over tp4:
    three residual layers, a head after each, the confidence (max softmax
    probability) from a pmax'd maximum and a psum'd denominator; the output
    is the first confident head's logits and the exit index. [denominator not
    psum'd; maximum not pmax'd]
 4. early-exit training with alive masks, dp4, check_vma=False: the loss of
    head l counts only examples not confidently exited before l, normalised
    by the global number alive (psum'd counts); gradients of the local share
    psum'd over dp by hand; optax.sgd with momentum. [pmean of the local
    normalised losses; gradients pmean'd instead of psum'd]
 5. ToMe bipartite soft matching, batch over dp2, features over tp4: cosine
    similarities of even (A) and odd (B) tokens from psum'd dot products and
    psum'd squared norms, each A token's best B match, the r most similar A
    tokens merged into their matches by segment_sum and averaged by counts.
    [similarity from local features only; norms not psum'd; merged sums not
    divided by the counts]
 6. token dropping with a global capacity, tokens over dp4: router scores
    all_gather'd, global ranks by a double argsort, each device's ranks by a
    dynamic_slice at its offset; tokens of rank < capacity go through the
    MLP, the rest pass through. [ranks sliced at offset 0; local ranks with a
    quarter of the capacity; ascending sort]
 7. adaptive computation time (Graves) in a lax.scan of 6 steps, batch over
    dp2, hidden units over tp4: the RNN state all_gather'd for the
    column-parallel cell, the halting logit psum'd, the remainder 1 - cum at
    the halting step, the ponder cost pmean'd over dp. [halting logit not
    psum'd; ponder cost not pmean'd]
 8. adaptive computation time in a lax.while_loop, batch over dp4: the state
    centred by the global batch mean (pmean), the loop running while any
    example anywhere is running (pmax of a flag). [local batch mean;
    halting weight p instead of the remainder]
 9. adaptive computation time in a lax.while_loop, batch over dp4, the loop
    condition local to the device (correct: no collective inside the loop,
    extra iterations leave halted examples unchanged); no bug variants.
10. stochastic depth training step, dp2 x tp4, check_vma=True: per-example
    keep masks of every layer drawn from a key folded with the layer index
    for the whole batch and sliced at the device's rows, rescaled by 1 /
    keep; optax.adamw. [masks drawn at the local batch shape; key folded
    with the device index; loss psum'd over dp]
11. k-winners-take-all MLP, batch over dp2, hidden over tp4: the local top-k
    values all_gather'd over tp, the global k-th value as the threshold,
    row-parallel output psum'd. [local top-k / tp threshold; k-th value as
    the pmax of the local k-th values; output not psum'd]
12. TopK sparse autoencoder training step, dp2 x tp4, check_vma=True:
    latents over tp, the global top-k by all_gather'd local top-k values,
    decoder output psum'd, loss pmean'd over dp, optax.adam, each latent's
    decoder row renormalised after the update (local to its shard). [local
    top-k; row norms psum'd over tp]
13. dynamic block-sparse attention, sequence over sp4: keys and values
    all_gather'd, mean-pooled query and key blocks scored, each query block
    keeps its top-3 causal key blocks (the diagonal forced in), a causal
    token mask at global positions. [block-causal test at local query block
    indices; token-causal test at local query positions]
14. top-k attention, keys and values over sp4, queries replicated: the
    global k-th score from all_gather'd local top-k values, the softmax over
    the kept keys merged by a pmax'd maximum and psum'd numerator and
    denominator. [local k-th score; maximum not pmax'd; denominator not
    psum'd (a device with no kept key divides by 0)]
15. stochastic depth forward in bf16 with per-example keep masks passed in
    replicated and sliced at the device's rows, dp2 x tp4 with the residual
    stream's sequence over tp (all_gather before the column-parallel
    projection, psum_scatter after the row-parallel one). [masks sliced at
    offset 0; psum then the first sequence block]
16. ACT training step with a ponder cost (the scan of 7), dp4,
    check_vma=False, gradients of the local loss pmean'd by hand,
    optax.adam. [gradients not reduced; gradients psum'd]
17. k-winners-take-all with the threshold found by bisection in a
    lax.while_loop (rows with exactly k winners stay put), the count psum'd
    over tp, the bracket from pmin'd / pmax'd row extremes, the loop running
    until every row everywhere has k winners (pmin'd flag). [count not
    psum'd (k / tp per shard); k + 1 winners]
18. stochastic depth with one key per example (vmap of fold_in at the
    example's global index), batch over dp8. [local example index; strided
    index as if the batch were interleaved]
19. token dropping with ranks from psum'd comparison counts (no sort),
    tokens over dp4. [counts not psum'd; >= counts the token itself]
20. early exit with lax.cond skipping the remaining layers once every
    example has exited, batch over dp4, predicate pmin'd over dp. [skip
    when any example has exited]
21. the same with the predicate local to the device (correct: the branches
    hold no collective and skipping only leaves exited examples alone); no
    bug variants.
22. mixture-of-depths with batch over dp2 and the hidden over tp4, the
    router scores pmax'ed over tp although every tp rank has them already,
    the row-parallel output psum_scatter'ed over the model dim and
    all_gather'ed back instead of psum'd. [router scores psum'd (tp times
    too large); all_gather along the wrong dim, reshaped]
GSPMD pairs (jax.jit with in / out shardings; correct): 23. the
mixture-of-depths training step of 2 (dp2 x tp4); 24. ToMe merging of 5
with batch over dp and features over tp; 25. the early-exit inference of 3
with the head vocabulary over tp; 26. token dropping of 6 with the tokens over
dp; 27. the TopK SAE step of 12 (dp2 x tp4); 28. the ACT scan of 7 with the
batch over dp8; 29. the top-k attention of 14 with keys over sp4; 30. the
bf16 stochastic depth of 15 under dp2 x tp4.
Numerics: every correct pair agrees with its baseline at rounding level; every
bug variant differs clearly (see "numerics"). Thresholds (early exit) are
placed in gaps of the inputs' confidences so rounding cannot flip a decision.
A first draft of 17 moved rows that already had k winners, so the loop only
stopped when all rows happened to land in their k-window together; in f64 it
ran out of iterations and the result jumped with 1e-9 input moves (the
witness said so); rewritten to freeze finished rows.
Run from the repository root: bash samples/gen/run_fresh109.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh109.sh)
from fresh_lib import Corpus, seeded, state_specs, mse  # noqa: E402

SCRIPT = "samples/gen/fresh109.py"
C = Corpus("samples/fresh109", SCRIPT, "samples/gen/run_fresh109.sh", sys.argv[1:])
rng, R, I = seeded(10909)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
NEG = -1e30


def gelu_mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


# ---------------------------------------------------------------------------
# 1. mixture-of-depths block, sequence over sp
B1, T1, D1, F1, K1 = 2, 16, 16, 32, 6


def mod_ref(x, wr, w1, w2):
    r = jnp.einsum("btd,d->bt", x, wr)
    top, ix = lax.top_k(r, K1)
    sel = jnp.take_along_axis(x, ix[..., None], axis=1)
    y = gelu_mlp(sel, w1, w2) * jax.nn.sigmoid(top)[..., None]
    return x.at[jnp.arange(x.shape[0])[:, None], ix].add(y)


def mod_sp(bug):
    def f(x, wr, w1, w2):
        r = jnp.einsum("btd,d->bt", x, wr)
        if bug == "local-topk":
            kth = lax.top_k(r, K1 // 4 + 1)[0][:, -1:]
        else:
            allr = lax.all_gather(r, "sp", axis=1, tiled=True)
            kth = lax.top_k(allr, K1 + 1 if bug == "kth-plus-one" else K1)[0][:, -1:]
        sel = (r > kth) if bug == "strict-greater" else (r >= kth)
        y = gelu_mlp(x, w1, w2) * jax.nn.sigmoid(r)[..., None]
        return x + jnp.where(sel[..., None], y, 0.0)
    return f


C.smap("s.mod_router_topk_threshold.sp4", {"sp": 4}, mod_sp, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
       mod_ref, (R(B1, T1, D1), R(D1), R(D1, F1, scale=0.3), R(F1, D1, scale=0.3)),
       bugs=[("local-topk", ["missing-collective"]), ("kth-plus-one", ["wrong-offset"]),
             ("strict-greater", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 2. mixture-of-depths training step, dp2 x tp4 (check_vma=True)
B2, T2, D2, F2, K2 = 4, 8, 16, 32, 3
OPT2 = optax.adam(1e-2)
SPEC2 = {"wr": P(), "w1": P(None, "tp"), "w2": P("tp", None), "g": P()}


def mod_fwd(p, x, tp_sum=lambda y: y):
    r = x @ p["wr"]
    top, ix = lax.top_k(r, K2)
    sel = jnp.take_along_axis(x, ix[..., None], axis=1)
    h = jax.nn.gelu(jnp.einsum("bkd,df->bkf", sel * p["g"], p["w1"]))
    y = tp_sum(jnp.einsum("bkf,fd->bkd", h, p["w2"])) * jax.nn.sigmoid(top)[..., None]
    return x.at[jnp.arange(x.shape[0])[:, None], ix].add(y)


def mod_step(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: mse(mod_fwd(p, x), y))(p)
    u, s = OPT2.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def mod_step_sm(bug):
    def f(p, s, x, y):
        def loss(p):
            ts = (lambda z: z) if bug == "row-parallel-not-psummed" else (lambda z: psum(z, "tp"))
            l = mse(mod_fwd(p, x, ts), y)
            if bug == "loss-psum-dp":
                return psum(l, "dp")
            if bug == "row-parallel-not-psummed":
                return pmean(l, ("dp", "tp"))
            return pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT2.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P2 = {"wr": R(D2), "w1": R(D2, F2, scale=0.3), "w2": R(F2, D2, scale=0.3), "g": 1 + R(D2, scale=0.1)}
S2 = OPT2.init(P2)
SS2 = state_specs(S2, SPEC2)
X2, Y2 = R(B2, T2, D2), R(B2, T2, D2)
C.smap("s.mod_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, mod_step_sm, (SPEC2, SS2, P("dp"), P("dp")),
       (SPEC2, SS2, P()), mod_step, (P2, S2, X2, Y2),
       bugs=[("loss-psum-dp", ["wrong-scale"]), ("row-parallel-not-psummed", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 3. early-exit inference: batch over dp, head vocabulary over tp
B3, D3, V3, L3 = 8, 16, 32, 3


def ee_confs(x, w, heads):
    h, out = x, []
    for l in range(L3):
        h = h + jnp.tanh(h @ w[l])
        out.append(jax.nn.softmax(h @ heads[l], -1).max(-1))
    return np.stack([np.asarray(o) for o in out])


def pick_tau(c):
    """A threshold in the widest gap of the confidences between their 30th
    and 70th percentiles, so that rounding cannot flip an exit decision."""
    v = np.sort(c.ravel())
    lo, hi = int(0.3 * len(v)), int(0.7 * len(v))
    g = np.argmax(v[lo + 1:hi] - v[lo:hi - 1]) + lo
    return float((v[g] + v[g + 1]) / 2)


X3, W3, H3 = R(B3, D3), R(L3, D3, D3, scale=0.4), R(L3, D3, V3, scale=0.6)
TAU3 = pick_tau(ee_confs(X3, W3, H3))


def ee_ref(x, w, heads):
    h = x
    done = jnp.zeros(x.shape[0], bool)
    out = jnp.zeros((x.shape[0], heads.shape[-1]), x.dtype)
    which = jnp.full(x.shape[0], L3 - 1, jnp.int32)
    for l in range(L3):
        h = h + jnp.tanh(h @ w[l])
        lg = h @ heads[l]
        conf = jnp.max(jax.nn.softmax(lg, -1), -1)
        take = ~done & ((conf > TAU3) | (l == L3 - 1))
        out = jnp.where(take[:, None], lg, out)
        which = jnp.where(take & (conf > TAU3), l, which)
        done = done | take
    return out, which


def ee_sm(bug):
    def f(x, w, heads):
        h = x
        done = jnp.zeros(x.shape[0], bool)
        out = jnp.zeros((x.shape[0], heads.shape[-1]), x.dtype)
        which = jnp.full(x.shape[0], L3 - 1, jnp.int32)
        for l in range(L3):
            h = h + jnp.tanh(h @ w[l])
            lg = h @ heads[l]
            m = lg.max(-1)
            if bug != "max-not-pmaxed":
                m = pmax(m, "tp")
            z = jnp.sum(jnp.exp(lg - m[:, None]), -1)
            if bug != "denominator-not-psummed":
                z = psum(z, "tp")
            conf = 1.0 / z
            take = ~done & ((conf > TAU3) | (l == L3 - 1))
            out = jnp.where(take[:, None], lg, out)
            which = jnp.where(take & (conf > TAU3), l, which)
            done = done | take
        return out, which
    return f


C.smap("s.early_exit_confidence_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, ee_sm, (P("dp"), P(), P(None, None, "tp")),
       (P("dp", "tp"), P("dp")), ee_ref, (X3, W3, H3),
       bugs=[("denominator-not-psummed", ["missing-all-reduce"]), ("max-not-pmaxed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. early-exit training with alive masks, dp4
B4, D4, V4 = 16, 12, 10
OPT4 = optax.sgd(0.1, momentum=0.9)
P4 = {"w": R(3, D4, D4, scale=0.4), "head": R(3, D4, V4, scale=0.8)}
X4, LAB4 = R(B4, D4), I(0, V4, B4)
TAU4 = pick_tau(ee_confs(X4, P4["w"], P4["head"])[:2])  # heads 0 and 1 decide who stays alive


def ee_loss_shares(p, x, lab):
    """Per head: (sum over alive examples of the CE, number alive)."""
    h = x
    alive = jnp.ones(x.shape[0], jnp.float32)
    out = []
    for l in range(3):
        h = h + jnp.tanh(h @ p["w"][l])
        lg = h @ p["head"][l]
        ce = optax.softmax_cross_entropy_with_integer_labels(lg, lab)
        out.append((jnp.sum(alive * ce), jnp.sum(alive)))
        conf = jax.lax.stop_gradient(jnp.max(jax.nn.softmax(lg, -1), -1))
        alive = alive * (conf <= TAU4)
    return out


def ee_train(p, s, x, lab):
    def loss(p):
        return sum(a / jnp.maximum(n, 1.0) for a, n in ee_loss_shares(p, x, lab))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def ee_train_sm(bug):
    def f(p, s, x, lab):
        def loss(p):
            tot = 0.0
            for a, n in ee_loss_shares(p, x, lab):
                if bug == "pmean-local-means":
                    tot = tot + a / jnp.maximum(n, 1.0) / 4
                else:
                    tot = tot + a / jnp.maximum(psum(lax.stop_gradient(n), "dp"), 1.0)
            return tot
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grads-pmeaned":
            g = pmean(g, "dp")
        else:
            g = psum(g, "dp")
        l = psum(l, "dp")
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


S4 = OPT4.init(P4)
C.smap("s.early_exit_alive_mask_train_sgd.dp4", {"dp": 4}, ee_train_sm, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), ee_train, (P4, S4, X4, LAB4),
       bugs=[("pmean-local-means", ["wrong-reduction"]), ("grads-pmeaned", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. ToMe bipartite soft matching, batch over dp, features over tp
B5, T5, D5, R5 = 4, 16, 32, 4


def tome_merge(a, b, score, best):
    """a, b (ta, d) / (tb, d) one sequence; score, best (ta,): merge the R5
    best-scoring A tokens into their B matches (mean), keep the others."""
    order = jnp.argsort(-score)
    src, keep = order[:R5], order[R5:]
    dst = best[src]
    bsum = b + jax.ops.segment_sum(a[src], dst, num_segments=b.shape[0])
    cnt = 1.0 + jax.ops.segment_sum(jnp.ones(R5, a.dtype), dst, num_segments=b.shape[0])
    return jnp.concatenate([a[keep], bsum], 0), cnt


def tome_ref(x):
    a, b = x[:, ::2], x[:, 1::2]
    an = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    bn = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
    s = jnp.einsum("bid,bjd->bij", an, bn)
    merged, cnt = jax.vmap(tome_merge)(a, b, s.max(-1), s.argmax(-1))
    ta = a.shape[1] - R5
    return jnp.concatenate([merged[:, :ta], merged[:, ta:] / cnt[..., None]], 1)


def tome_sm(bug):
    def f(x):
        a, b = x[:, ::2], x[:, 1::2]
        dots = jnp.einsum("bid,bjd->bij", a, b)
        na, nb = jnp.sum(a * a, -1), jnp.sum(b * b, -1)
        if bug != "local-similarity":
            dots = psum(dots, "tp")
            if bug != "norms-not-psummed":
                na, nb = psum(na, "tp"), psum(nb, "tp")
        s = dots * lax.rsqrt(na)[:, :, None] * lax.rsqrt(nb)[:, None, :]
        merged, cnt = jax.vmap(tome_merge)(a, b, s.max(-1), s.argmax(-1))
        ta = a.shape[1] - R5
        if bug == "sum-not-mean":
            return merged
        return jnp.concatenate([merged[:, :ta], merged[:, ta:] / cnt[..., None]], 1)
    return f


X5 = R(B5, T5, D5)
C.smap("s.tome_bipartite_merge_features_tp.dp2xtp4", {"dp": 2, "tp": 4}, tome_sm, (P("dp", None, "tp"),),
       P("dp", None, "tp"), tome_ref, (X5,),
       bugs=[("local-similarity", ["missing-all-reduce"]), ("norms-not-psummed", ["missing-all-reduce"]),
             ("sum-not-mean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. token dropping with a global capacity, tokens over dp
N6, D6, F6, C6 = 32, 8, 16, 12


def drop_ref(x, ws, w1, w2):
    sc = x @ ws
    keep = jnp.argsort(-sc)[:C6]
    y = gelu_mlp(x[keep], w1, w2) * jnp.tanh(sc[keep])[:, None]
    return x.at[keep].add(y)


def drop_sm(bug):
    def f(x, ws, w1, w2):
        n = x.shape[0]
        sc = x @ ws
        if bug == "local-ranks":
            rank = jnp.argsort(jnp.argsort(-sc))
            keep = rank < C6 // 4
        else:
            alls = lax.all_gather(sc, "dp", tiled=True)
            rank = jnp.argsort(jnp.argsort(alls if bug == "ascending-sort" else -alls))
            off = 0 if bug == "ranks-offset-zero" else idx("dp") * n
            keep = lax.dynamic_slice(rank, (off,), (n,)) < C6
        y = gelu_mlp(x, w1, w2) * jnp.tanh(sc)[:, None]
        return x + jnp.where(keep[:, None], y, 0.0)
    return f


C.smap("s.token_drop_global_capacity_argsort.dp4", {"dp": 4}, drop_sm, (P("dp"), P(), P(), P()), P("dp"),
       drop_ref, (R(N6, D6), R(D6), R(D6, F6, scale=0.4), R(F6, D6, scale=0.4)),
       bugs=[("ranks-offset-zero", ["wrong-offset"]), ("local-ranks", ["missing-collective"]),
             ("ascending-sort", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 7. ACT in a lax.scan, batch over dp, hidden units over tp
B7, D7, H7, S7, EPS7 = 8, 8, 16, 6, 0.01


def act_scan(x, W, U, wh, bh, gather=lambda h: h, hsum=lambda z: z, bmean=jnp.mean):
    def step(c, i):
        h, cum, rem, n, out, run = c
        h = jnp.tanh(gather(h) @ W + x @ U)
        p = jax.nn.sigmoid(hsum(h @ wh) + bh)
        still = run & (cum + p < 1 - EPS7) & (i < S7 - 1)
        stop = run & ~still
        w = jnp.where(still, p, jnp.where(stop, 1 - cum, 0.0))
        rem = rem + jnp.where(stop, 1 - cum, 0.0)
        cum = cum + jnp.where(still, p, 0.0)
        n = n + run.astype(jnp.float32)
        return (h, cum, rem, n, out + w[:, None] * h, still), None
    b = x.shape[0]
    z = jnp.zeros(b)
    c0 = (jnp.zeros((b, W.shape[1])), z, z, z, jnp.zeros((b, W.shape[1])), jnp.ones(b, bool))
    (h, cum, rem, n, out, run), _ = lax.scan(step, c0, jnp.arange(S7))
    return out, bmean(n + rem)


def act_scan_sm(bug):
    def f(x, W, U, wh, bh):
        g = lambda h: lax.all_gather(h, "tp", axis=1, tiled=True)
        hs = (lambda z: z) if bug == "halting-logit-not-psummed" else (lambda z: psum(z, "tp"))
        bm = jnp.mean if bug == "ponder-not-pmeaned" else (lambda v: pmean(jnp.mean(v), "dp"))
        return act_scan(x, W, U, wh, bh, g, hs, bm)
    return f


C.smap("s.act_scan_halting_remainder.dp2xtp4", {"dp": 2, "tp": 4}, act_scan_sm,
       (P("dp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), (P("dp", "tp"), P()),
       act_scan, (R(B7, D7), R(H7, H7, scale=0.4), R(D7, H7, scale=0.6), R(H7, scale=0.5), np.float32(-1.0)),
       bugs=[("halting-logit-not-psummed", ["missing-all-reduce"]), ("ponder-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8./9. ACT in a lax.while_loop, batch over dp
B8, D8, MAX8 = 16, 8, 10


def act_while(x, W, wh, bh, bmean=lambda v: jnp.mean(v, 0), anyrun=jnp.any, bug=None):
    h0 = x - bmean(x)

    def cond(c):
        return anyrun(c[5]) & (c[0] < MAX8)

    def body(c):
        i, h, cum, n, out, run = c
        h = jnp.tanh(h @ W + h0)
        p = jax.nn.sigmoid(h @ wh + bh)
        still = run & (cum + p < 0.99) & (i < MAX8 - 1)
        stop = run & ~still
        last = p if bug == "halting-weight-p" else 1 - cum
        w = jnp.where(still, p, jnp.where(stop, last, 0.0))
        return (i + 1, h, cum + jnp.where(still, p, 0.0), n + run, out + w[:, None] * h, still)
    b = x.shape[0]
    c0 = (0, jnp.zeros_like(x), jnp.zeros(b), jnp.zeros(b, jnp.int32), jnp.zeros_like(x), jnp.ones(b, bool))
    _, _, cum, n, out, _ = lax.while_loop(cond, body, c0)
    return out, n


def act_while_sm(bug):
    def f(x, W, wh, bh):
        bm = (lambda v: jnp.mean(v, 0)) if bug == "local-batch-mean" else (lambda v: pmean(jnp.mean(v, 0), "dp"))
        return act_while(x, W, wh, bh, bm, lambda r: pmax(jnp.any(r).astype(jnp.int32), "dp") > 0, bug)
    return f


def act_while_localcond_sm(bug):
    def f(x, W, wh, bh):
        return act_while(x, W, wh, bh, lambda v: pmean(jnp.mean(v, 0), "dp"), jnp.any)
    return f


A8 = (R(B8, D8), R(D8, D8, scale=0.5), R(D8, scale=1.0), np.float32(-1.5))
C.smap("s.act_while_global_flag.dp4", {"dp": 4}, act_while_sm, (P("dp"), P(), P(), P()), (P("dp"), P("dp")),
       act_while, A8, bugs=[("local-batch-mean", ["missing-all-reduce"]), ("halting-weight-p", ["wrong-value"])])
C.smap("s.act_while_local_cond.dp4", {"dp": 4}, act_while_localcond_sm, (P("dp"), P(), P(), P()),
       (P("dp"), P("dp")), act_while, A8)

# ---------------------------------------------------------------------------
# 10. stochastic depth training step, dp2 x tp4 (check_vma=True)
B10, D10, F10, L10, KEEP10 = 8, 8, 16, 3, 0.6
OPT10 = optax.adamw(3e-3, weight_decay=0.05)
SPEC10 = {"w1": P(None, None, "tp"), "w2": P(None, "tp", None), "b": P()}


def sd_fwd(p, x, masks, tp_sum=lambda y: y):
    for l in range(L10):
        y = tp_sum(jax.nn.relu(x @ p["w1"][l]) @ p["w2"][l]) + p["b"][l]
        x = x + (masks[l] / KEEP10)[:, None] * y
    return x


def sd_masks(key, b):
    return [jax.random.bernoulli(jax.random.fold_in(key, l), KEEP10, (b,)).astype(jnp.float32) for l in range(L10)]


def sd_step(p, s, key, x, y):
    masks = sd_masks(key, x.shape[0])
    l, g = jax.value_and_grad(lambda p: mse(sd_fwd(p, x, masks), y))(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def sd_step_sm(bug):
    def f(p, s, key, x, y):
        b = x.shape[0]
        if bug == "masks-local-shape":
            masks = sd_masks(key, b)
        elif bug == "key-folded-with-device":
            masks = sd_masks(jax.random.fold_in(key, idx("dp")), b)
        else:
            masks = [lax.dynamic_slice_in_dim(m, idx("dp") * b, b) for m in sd_masks(key, 2 * b)]

        def loss(p):
            l = mse(sd_fwd(p, x, masks, lambda z: psum(z, "tp")), y)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P10 = {"w1": R(L10, D10, F10, scale=0.4), "w2": R(L10, F10, D10, scale=0.4), "b": R(L10, D10, scale=0.1)}
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
KEY10 = np.asarray(jax.random.key_data(jax.random.PRNGKey(7)))
C.smap("s.stochastic_depth_keyed_masks_adamw.dp2xtp4", {"dp": 2, "tp": 4}, sd_step_sm,
       (SPEC10, SS10, P(), P("dp"), P("dp")), (SPEC10, SS10, P()), sd_step, (P10, S10, KEY10, R(B10, D10), R(B10, D10)),
       bugs=[("masks-local-shape", ["wrong-random-key"]), ("key-folded-with-device", ["wrong-random-key"]),
             ("loss-psum-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 11. k-winners-take-all MLP, batch over dp, hidden over tp
B11, D11, F11, K11 = 8, 16, 64, 8


def kwta_ref(x, w1, w2):
    h = x @ w1
    kth = lax.top_k(h, K11)[0][:, -1:]
    return jnp.where(h >= kth, h, 0.0) @ w2


def kwta_sm(bug):
    def f(x, w1, w2):
        h = x @ w1
        if bug == "local-kth":
            kth = lax.top_k(h, K11 // 4)[0][:, -1:]
        elif bug == "kth-pmax-of-local":
            kth = pmax(lax.top_k(h, K11)[0][:, -1:], "tp")
        else:
            cand = lax.all_gather(lax.top_k(h, K11)[0], "tp", axis=1, tiled=True)
            kth = lax.top_k(cand, K11)[0][:, -1:]
        y = jnp.where(h >= kth, h, 0.0) @ w2
        return y if bug == "output-not-psummed" else psum(y, "tp")
    return f


C.smap("s.kwta_global_kth_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, kwta_sm, (P("dp"), P(None, "tp"), P("tp")), P("dp"),
       kwta_ref, (R(B11, D11), R(D11, F11, scale=0.3), R(F11, D11, scale=0.3)),
       bugs=[("local-kth", ["missing-collective"]), ("kth-pmax-of-local", ["wrong-collective-op"]),
             ("output-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. TopK sparse autoencoder training step, dp2 x tp4 (check_vma=True)
B12, D12, F12, K12 = 8, 16, 64, 6
OPT12 = optax.adam(1e-2)
SPEC12 = {"enc": P(None, "tp"), "benc": P("tp"), "dec": P("tp", None), "bdec": P()}


def sae_fwd(p, x, kth_of=lambda z: lax.top_k(z, K12)[0][:, -1:], tp_sum=lambda y: y):
    pre = (x - p["bdec"]) @ p["enc"] + p["benc"]
    kth = lax.stop_gradient(kth_of(pre))
    z = jnp.where(pre >= kth, jax.nn.relu(pre), 0.0)
    return tp_sum(z @ p["dec"]) + p["bdec"]


def sae_step(p, s, x):
    l, g = jax.value_and_grad(lambda p: mse(sae_fwd(p, x), x))(p)
    u, s = OPT12.update(g, s, p)
    p = optax.apply_updates(p, u)
    return dict(p, dec=p["dec"] * lax.rsqrt(jnp.sum(p["dec"] ** 2, 1, keepdims=True))), s, l


def sae_step_sm(bug):
    def f(p, s, x):
        def kth_of(pre):
            if bug == "local-topk":
                return lax.top_k(pre, K12)[0][:, -1:]
            cand = lax.all_gather(lax.top_k(pre, K12)[0], "tp", axis=1, tiled=True)
            return lax.top_k(cand, K12)[0][:, -1:]

        def loss(p):
            return pmean(mse(sae_fwd(p, x, kth_of, lambda y: psum(y, "tp")), x), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT12.update(g, s, p)
        p = optax.apply_updates(p, u)
        sq = jnp.sum(p["dec"] ** 2, 1, keepdims=True)  # each latent's decoder row: local to its shard
        if bug == "row-norms-psummed":
            sq = psum(sq, "tp")
        return dict(p, dec=p["dec"] * lax.rsqrt(sq)), s, l
    return f


P12 = {"enc": R(D12, F12, scale=0.3), "benc": R(F12, scale=0.1), "dec": R(F12, D12, scale=0.3), "bdec": R(D12, scale=0.1)}
S12 = OPT12.init(P12)
SS12 = state_specs(S12, SPEC12)
C.smap("s.topk_sae_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, sae_step_sm, (SPEC12, SS12, P("dp")),
       (SPEC12, SS12, P()), sae_step, (P12, S12, R(B12, D12)),
       bugs=[("local-topk", ["missing-collective"]), ("row-norms-psummed", ["wrong-reduction"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 13. dynamic block-sparse attention, sequence over sp
B13, T13, H13, E13, BS13, S13 = 2, 32, 2, 8, 4, 3


def blocksparse_mask(q, k, qblk, qpos):
    """q (b, tq, h, e) local queries, k (b, T, h, e) all keys; qblk / qpos
    the query blocks' and tokens' global indices."""
    b, tq, h, e = q.shape
    nb = k.shape[1] // BS13
    qb = q.reshape(b, tq // BS13, BS13, h, e).mean(2)
    kb = k.reshape(b, nb, BS13, h, e).mean(2)
    sc = jnp.einsum("bihe,bjhe->bhij", qb, kb)
    kblk = jnp.arange(nb)
    causal = kblk[None, :] <= qblk[:, None]
    sc = jnp.where(causal, sc, NEG)
    sc = jnp.where(kblk[None, :] == qblk[:, None], 1e9, sc)
    thr = lax.top_k(sc, S13)[0][..., -1:]
    selb = (sc >= thr) & causal                                 # (b, h, qblocks, kblocks)
    tok = jnp.repeat(jnp.repeat(selb, BS13, 2), BS13, 3)         # (b, h, tq, T)
    return tok & (qpos[:, None] >= jnp.arange(k.shape[1])[None, :])


def bs_attn(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(jnp.where(ok, s, NEG), -1), v)


def bs_ref(q, k, v):
    t = q.shape[1]
    return bs_attn(q, k, v, blocksparse_mask(q, k, jnp.arange(t // BS13), jnp.arange(t)))


def bs_sm(bug):
    def f(q, k, v):
        tl = q.shape[1]
        me = idx("sp")
        kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        nbl = tl // BS13
        qblk = jnp.arange(nbl) + (0 if bug == "local-query-blocks" else me * nbl)
        qpos = jnp.arange(tl) + (0 if bug == "local-query-positions" else me * tl)
        return bs_attn(q, kk, vv, blocksparse_mask(q, kk, qblk, qpos))
    return f


C.smap("s.dynamic_block_sparse_attention.sp4", {"sp": 4}, bs_sm, (P(None, "sp"),) * 3, P(None, "sp"), bs_ref,
       (R(B13, T13, H13, E13), R(B13, T13, H13, E13), R(B13, T13, H13, E13)),
       bugs=[("local-query-blocks", ["wrong-offset"]), ("local-query-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. top-k attention (each query attends to its KA best keys), keys and
#     values over sp, queries replicated
B14, TQ14, TK14, H14, E14, KA14 = 2, 4, 32, 2, 8, 6


def topk_attn_ref(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E14)
    kth = lax.top_k(s, KA14)[0][..., -1:]
    s = jnp.where(s >= kth, s, -jnp.inf)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def topk_attn_sm(bug):
    def f(q, k, v):
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E14)
        loc = lax.top_k(s, KA14)[0]
        if bug == "local-kth":
            kth = loc[..., -1:]
        else:
            kth = lax.top_k(lax.all_gather(loc, "sp", axis=3, tiled=True), KA14)[0][..., -1:]
        keep = s >= kth
        m = jnp.max(jnp.where(keep, s, NEG), -1, keepdims=True)
        if bug != "max-not-pmaxed":
            m = pmax(m, "sp")
        e = jnp.where(keep, jnp.exp(s - m), 0.0)
        num = psum(jnp.einsum("bhqk,bkhe->bqhe", e, v), "sp")
        den = jnp.sum(e, -1)
        if bug != "denominator-not-psummed":
            den = psum(den, "sp")
        return num / jnp.transpose(den, (0, 2, 1))[..., None]
    return f


A14 = (R(B14, TQ14, H14, E14), R(B14, TK14, H14, E14), R(B14, TK14, H14, E14))
C.smap("s.topk_attention_keys_sp.sp4", {"sp": 4}, topk_attn_sm, (P(), P(None, "sp"), P(None, "sp")), P(),
       topk_attn_ref, A14,
       bugs=[("local-kth", ["missing-collective"]), ("max-not-pmaxed", ["missing-collective"]),
             ("denominator-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 15. stochastic depth forward in bf16 with per-example keep masks passed in
#     (replicated, sliced at the device's rows), dp2 x tp4 with the residual
#     stream's sequence over tp (all_gather before the column-parallel
#     projection, psum_scatter after the row-parallel one)
B15, T15, D15, F15, L15, KEEP15 = 4, 8, 16, 32, 2, 0.75


def sd_bf16_ref(x, masks, w1, w2):
    for l in range(L15):
        y = jax.nn.gelu(jnp.einsum("btd,df->btf", x, w1[l])).astype(jnp.bfloat16)
        y = jnp.einsum("btf,fd->btd", y, w2[l], preferred_element_type=jnp.float32)
        x = x + (masks[l] / KEEP15).astype(jnp.bfloat16)[:, None, None] * y.astype(jnp.bfloat16)
    return x


def sd_bf16_sm(bug):
    def f(x, masks, w1, w2):
        b = x.shape[0]
        off = 0 if bug == "mask-offset-zero" else idx("dp") * b
        mk = lax.dynamic_slice_in_dim(masks, off, b, axis=1)
        for l in range(L15):
            xf = lax.all_gather(x, "tp", axis=1, tiled=True)
            y = jax.nn.gelu(jnp.einsum("btd,df->btf", xf, w1[l])).astype(jnp.bfloat16)
            y = jnp.einsum("btf,fd->btd", y, w2[l], preferred_element_type=jnp.float32)
            if bug == "psum-then-first-block":
                y = psum(y, "tp")[:, :x.shape[1]]
            else:
                y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
            x = x + (mk[l] / KEEP15).astype(jnp.bfloat16)[:, None, None] * y.astype(jnp.bfloat16)
        return x
    return f


A15 = (R(B15, T15, D15, dt=jnp.bfloat16), (rng.random((L15, B15)) < KEEP15).astype(np.float32),
       R(L15, D15, F15, scale=0.3, dt=jnp.bfloat16), R(L15, F15, D15, scale=0.3, dt=jnp.bfloat16))
A15[1][:, 0] = [1.0, 0.0]  # the first example's layers differ, so a slice at offset 0 shows
A15[1][:, B15 // 2] = [0.0, 1.0]
C.smap("s.stochastic_depth_bf16_seqpar.dp2xtp4", {"dp": 2, "tp": 4}, sd_bf16_sm,
       (P("dp", "tp"), P(), P(None, None, "tp"), P(None, "tp", None)), P("dp", "tp"), sd_bf16_ref, A15,
       bugs=[("mask-offset-zero", ["wrong-offset"]), ("psum-then-first-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. ACT training step with a ponder cost, dp4, check_vma=False: gradients
#     of the local loss pmean'd by hand, optax.adam
B16, D16, H16 = 16, 6, 8
OPT16 = optax.adam(5e-3)


def act_loss(p, x, y, bmean=jnp.mean):
    out, ponder = act_scan(x, p["W"], p["U"], p["wh"], p["bh"], bmean=bmean)
    return bmean(jnp.sum(jnp.square(out @ p["wo"] - y), -1)) + 0.01 * ponder


def act_train(p, s, x, y):
    l, g = jax.value_and_grad(act_loss)(p, x, y)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def act_train_sm(bug):
    def f(p, s, x, y):
        l, g = jax.value_and_grad(act_loss)(p, x, y)
        if bug == "grads-not-reduced":
            pass
        elif bug == "grads-psummed":
            g = psum(g, "dp")
        else:
            g = pmean(g, "dp")
        l = pmean(l, "dp")
        u, s = OPT16.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P16 = {"W": R(H16, H16, scale=0.4), "U": R(D16, H16, scale=0.6), "wh": R(H16, scale=0.5), "bh": np.float32(-0.8),
       "wo": R(H16, D16, scale=0.4)}
S16 = OPT16.init(P16)
C.smap("s.act_ponder_train_step_adam.dp4", {"dp": 4}, act_train_sm, (P(), P(), P("dp"), P("dp")), (P(), P(), P()),
       act_train, (P16, S16, R(B16, D16), R(B16, D16)),
       bugs=[("grads-not-reduced", ["missing-all-reduce"]), ("grads-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 17. k-winners-take-all with the threshold found by bisection in a
#     lax.while_loop: the number of winners psum'd over tp at each probe,
#     hidden over tp, batch over dp; the loop stops when every row's count
#     is exactly k (pmin'd flag over dp and tp so all devices run alike);
#     the bracket from each row's pmin'd / pmax'd extremes
B17, D17, F17, K17 = 8, 16, 64, 8


def kwta_bisect(h, count, done_all, k=K17, rmin=lambda v: v, rmax=lambda v: v):
    lo = rmin(jnp.min(h, -1)) - 1.0  # the bracket: each row's smallest and largest value
    hi = rmax(jnp.max(h, -1)) + 1.0

    def cond(c):
        i, lo, hi = c
        return (i < 60) & ~done_all(count(h >= ((lo + hi) / 2)[:, None]) == k)

    def body(c):
        i, lo, hi = c
        mid = (lo + hi) / 2
        c = count(h >= mid[:, None])  # too many winners: raise lo; too few: lower hi; exactly k: stay
        return i + 1, jnp.where(c > k, mid, lo), jnp.where(c < k, mid, hi)
    _, lo, hi = lax.while_loop(cond, body, (0, lo, hi))
    return (lo + hi) / 2


def kwta_bisect_ref(x, w1, w2):
    h = x @ w1
    t = kwta_bisect(h, lambda m: jnp.sum(m, -1), jnp.all)
    return jax.nn.relu(jnp.where(h >= t[:, None], h, 0.0)) @ w2


def kwta_bisect_sm(bug):
    def f(x, w1, w2):
        h = x @ w1
        if bug == "count-not-psummed":
            count = lambda m: jnp.sum(m, -1)
            k = K17 // 4
        else:
            count = lambda m: psum(jnp.sum(m, -1), "tp")
            k = K17
        if bug == "k-plus-one":
            k = K17 + 1
        done = lambda ok: pmin(jnp.all(ok).astype(jnp.int32), ("dp", "tp")) > 0
        t = kwta_bisect(h, count, done, k, lambda v: pmin(v, "tp"), lambda v: pmax(v, "tp"))
        return psum(jax.nn.relu(jnp.where(h >= t[:, None], h, 0.0)) @ w2, "tp")
    return f


C.smap("s.kwta_bisection_threshold_while.dp2xtp4", {"dp": 2, "tp": 4}, kwta_bisect_sm,
       (P("dp"), P(None, "tp"), P("tp")), P("dp"), kwta_bisect_ref,
       (R(B17, D17), R(D17, F17, scale=0.4), R(F17, D17, scale=0.3)),
       bugs=[("count-not-psummed", ["missing-all-reduce"]), ("k-plus-one", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 18. stochastic depth with one key per example (vmap of fold_in at the
#     example's global index), batch over dp8, forward only
B18, D18, L18, KEEP18 = 16, 8, 3, 0.5


def sd_example_masks(key, ex, l):
    return jax.vmap(lambda i: jax.random.bernoulli(jax.random.fold_in(jax.random.fold_in(key, l), i), KEEP18))(ex)


def sd_vmap_fwd(key, x, w, ex):
    for l in range(L18):
        m = sd_example_masks(key, ex, l).astype(x.dtype)
        x = x + (m / KEEP18)[:, None] * jnp.tanh(x @ w[l])
    return x


def sd_vmap_ref(key, x, w):
    return sd_vmap_fwd(key, x, w, jnp.arange(x.shape[0]))


def sd_vmap_sm(bug):
    def f(key, x, w):
        b = x.shape[0]
        if bug == "local-example-index":
            ex = jnp.arange(b)
        elif bug == "index-times-devices":
            ex = jnp.arange(b) * 8 + idx("dp")  # strided, as if the batch were interleaved
        else:
            ex = idx("dp") * b + jnp.arange(b)
        return sd_vmap_fwd(key, x, w, ex)
    return f


C.smap("s.stochastic_depth_per_example_keys.dp8", {"dp": 8}, sd_vmap_sm, (P(), P("dp"), P()), P("dp"), sd_vmap_ref,
       (np.asarray(jax.random.key_data(jax.random.PRNGKey(18))), R(B18, D18), R(L18, D18, D18, scale=0.5)),
       bugs=[("local-example-index", ["wrong-offset"]), ("index-times-devices", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 19. token dropping with ranks by psum'd comparison counts: every device
#     counts, for all gathered scores, how many of its own scores are larger;
#     the psum is each token's global rank (no sort), tokens over dp4
def drop_count_sm(bug):
    def f(x, ws, w1, w2):
        n = x.shape[0]
        sc = x @ ws
        alls = lax.all_gather(sc, "dp", tiled=True)
        if bug == "ge-counts-self":
            larger = jnp.sum(sc[None, :] >= alls[:, None], 1)
        else:
            larger = jnp.sum(sc[None, :] > alls[:, None], 1)
        rank_all = larger if bug == "counts-not-psummed" else psum(larger, "dp")
        rank = lax.dynamic_slice(rank_all, (idx("dp") * n,), (n,))
        keep = rank < C6
        y = gelu_mlp(x, w1, w2) * jnp.tanh(sc)[:, None]
        return x + jnp.where(keep[:, None], y, 0.0)
    return f


C.smap("s.token_drop_rank_by_psum_counts.dp4", {"dp": 4}, drop_count_sm, (P("dp"), P(), P(), P()), P("dp"),
       drop_ref, (R(N6, D6), R(D6), R(D6, F6, scale=0.4), R(F6, D6, scale=0.4)),
       bugs=[("counts-not-psummed", ["missing-all-reduce"]), ("ge-counts-self", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 20. early exit with lax.cond skipping the remaining layers once every
#     example has exited, batch over dp4 (layers and heads replicated, no
#     collective inside the branches): correct with the predicate global
#     (pmin) and, in 21, with a local one.
B20, D20, V20 = 16, 12, 10
X20, W20, H20 = R(B20, D20), R(4, D20, D20, scale=0.5), R(4, D20, V20, scale=1.5)
TAU20 = pick_tau(np.stack([ee_confs(X20, W20, H20)]))


def ee_cond(x, w, heads, all_done=jnp.all, bug=None):
    def layer(l, c):
        h, out, done = c
        h = h + jnp.tanh(h @ w[l])
        lg = h @ heads[l]
        conf = jnp.max(jax.nn.softmax(lg, -1), -1)
        take = ~done & ((conf > TAU20) | (l == 3))
        return h, jnp.where(take[:, None], lg, out), done | take

    c = (x, jnp.zeros((x.shape[0], V20)), jnp.zeros(x.shape[0], bool))
    for l in range(4):
        pred = jnp.any(c[2]) if bug == "skip-when-any-exited" else all_done(c[2])
        c = lax.cond(pred, lambda c: c, lambda c, l=l: layer(l, c), c)
    return c[1]


def ee_cond_sm(bug):
    def f(x, w, heads):
        if bug == "skip-when-any-exited":
            return ee_cond(x, w, heads, bug=bug)
        return ee_cond(x, w, heads, lambda d: pmin(jnp.all(d).astype(jnp.int32), "dp") > 0)
    return f


def ee_cond_local_sm(bug):
    return lambda x, w, heads: ee_cond(x, w, heads)


C.smap("s.early_exit_cond_skip_global_pred.dp4", {"dp": 4}, ee_cond_sm, (P("dp"), P(), P()), P("dp"), ee_cond,
       (X20, W20, H20), bugs=[("skip-when-any-exited", ["wrong-value"])])
C.smap("s.early_exit_cond_skip_local_pred.dp4", {"dp": 4}, ee_cond_local_sm, (P("dp"), P(), P()), P("dp"), ee_cond,
       (X20, W20, H20))

# ---------------------------------------------------------------------------
# 22. mixture-of-depths with the batch over dp and the hidden over tp, where
#     the user also pmax'es the (already tp-identical) router scores over tp
#     "to be safe" and psum_scatter + all_gather's the row-parallel output
#     instead of a psum (correct; bugs change the function)
def mod_dp_tp_sm(bug):
    def f(x, wr, w1, w2):
        r = pmax(jnp.einsum("btd,d->bt", x, wr), "tp")
        if bug == "router-psummed":
            r = psum(jnp.einsum("btd,d->bt", x, wr), "tp")
        top, ix = lax.top_k(r, K1)
        sel = jnp.take_along_axis(x, ix[..., None], axis=1)
        y = jnp.einsum("bkf,fd->bkd", jax.nn.gelu(sel @ w1), w2)
        y = lax.psum_scatter(y, "tp", scatter_dimension=2, tiled=True)
        if bug == "gather-wrong-dim":
            y = lax.all_gather(y, "tp", axis=1, tiled=True).reshape(y.shape[0], -1, y.shape[2] * 4)
        else:
            y = lax.all_gather(y, "tp", axis=2, tiled=True)
        y = y * jax.nn.sigmoid(top)[..., None]
        return x.at[jnp.arange(x.shape[0])[:, None], ix].add(y)
    return f


C.smap("s.mod_router_dp_hidden_tp_rs_ag.dp2xtp4", {"dp": 2, "tp": 4}, mod_dp_tp_sm, (P("dp"), P(), P(None, "tp"), P("tp")),
       P("dp"), mod_ref, (R(4, T1, D1), R(D1), R(D1, F1, scale=0.3), R(F1, D1, scale=0.3)),
       bugs=[("router-psummed", ["wrong-collective-op"]), ("gather-wrong-dim", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.mod_train_step_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC2, SS2, P("dp"), P("dp")), (SPEC2, SS2, P()),
        mod_step, (P2, S2, X2, Y2))
C.gspmd("g.tome_merge_batch_dp_features_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"),),
        P("dp", None, "tp"), tome_ref, (X5,))
C.gspmd("g.early_exit_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), P(None, None, "tp")),
        (P("dp", "tp"), P("dp")), ee_ref, (X3, W3, H3))
C.gspmd("g.token_drop_global_capacity.dp4", {"dp": 4}, (P("dp"), P(), P(), P()), P("dp"), drop_ref,
        (R(N6, D6), R(D6), R(D6, F6, scale=0.4), R(F6, D6, scale=0.4)))
C.gspmd("g.topk_sae_train_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC12, SS12, P("dp")), (SPEC12, SS12, P()),
        sae_step, (P12, S12, R(B12, D12)))
C.gspmd("g.act_scan_batch_dp.dp8", {"dp": 8}, (P("dp"), P(), P(), P(), P()), (P("dp"), P()),
        act_scan, (R(B7, D7), R(H7, H7, scale=0.4), R(D7, H7, scale=0.6), R(H7, scale=0.5), np.float32(-1.0)))
C.gspmd("g.topk_attention_keys_sp.sp4", {"sp": 4}, (P(), P(None, "sp"), P(None, "sp")), P(), topk_attn_ref, A14)
C.gspmd("g.stochastic_depth_bf16.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(), P(None, None, "tp"), P(None, "tp", None)), P("dp"), sd_bf16_ref, A15)

C.finish()
