"""samples/fresh52: a 52nd batch of programs as a user writes them, on the theme of model compression and sparsity under sharding in current JAX (global magnitude pruning with one threshold across shards found by a psum'd bisection, structured channel pruning by psum'd column norms, N:M masks whose groups straddle a shard boundary, movement pruning scores, fixed-mask sparse training with the mask after the update, low-rank factorized layers trained from scratch with the rank dim sharded, ALBERT-style cross-layer weight sharing, tied embedding / LM head, hidden-state distillation between a wide teacher and a narrow student, int8 fake quantization with a global scale), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. global unstructured magnitude pruning at 75% of a matrix over dp x tp:
    the threshold found by 40 steps of bisection (lax.fori_loop) on the
    count of |w| below it, the count psum'd over both axes and the upper
    bound pmax'd; returns the pruned matrix and the threshold. Bugs:
    threshold from the local shard only (local count, local k), the count
    psum'd over dp only.
 2. structured (output-channel) pruning of a row-parallel layer: the input
    dim over tp, batch over dp; column L2 norms from squares psum'd over
    tp, the 8 columns of largest norm kept (top_k on the replicated norms);
    returns x @ (w * mask) psum'd and the pruned weight. Bugs: norms from
    the local rows only, the squares psum'd over dp instead of tp.
 3. 4:8 sparsity along the input dim of a row-parallel layer, rows over
    tp8 (4 per device), so every group of 8 straddles two devices: the
    partner's rows by ppermute (i xor 1), the group assembled in order, the
    rank of every |w| in its group by a double argsort, the own half taken
    at offset (i % 2) * 4. Bugs: groups computed per shard (2:4 of the local
    rows), partner as the cyclic next device, own half always at offset 0.
 4. a movement pruning training step (Sanh et al.): weights and scores with
    the output dim over tp, batch over dp; the mask keeps the top 128 of the
    512 scores (all_gather over tp, lax.top_k), straight-through so the
    scores get dL/d(w m) * w; jax.value_and_grad inside the body
    (check_vma=True), loss psum'd over (dp, tp); optax.adam on weights and
    scores. Bugs: threshold from the local shard's top 32, scores
    all_gather'd over dp instead of tp.
 5. fixed-mask sparse Megatron MLP step (w1 columns / w2 rows over tp,
    masks sharded alike, batch over dp, check_vma=True) with optax.sgd +
    momentum from a non-zero momentum buffer; the mask applied after the
    update. Bugs: mask applied before the update (the momentum revives
    pruned weights), loss psum'd over dp instead of pmean'd.
 6. a low-rank factorized 2-layer MLP trained from scratch (each W = U V,
    the rank dim over tp: U's columns and V's rows), each product psum'd
    over tp, loss pmean'd over dp, optax.adamw (check_vma=True). Bugs: the
    first layer's rank dim not psum'd, psum after the GELU instead of
    before it, loss psum'd over dp.
 7. ALBERT-style cross-layer sharing: one Megatron MLP block (hidden over
    tp, batch over dp) applied 3 times by lax.scan over copies broadcast
    from the shared weights; the gradient taken w.r.t. the copies and
    summed over layers; plain SGD (check_vma=True). Bugs: the first
    layer's gradient only, the mean over layers.
 8. tied input embedding and LM head, vocab over tp (masked lookup psum'd,
    vocab-parallel cross-entropy with a stop_gradient'd pmax), batch over
    dp; the tied table passed as two leaves and its two gradients summed
    (check_vma=True), optax.sgd. Bugs: the head's gradient only, the
    target index without the vocab offset.
 9. hidden-state distillation from a teacher of width 32 to a student of
    width 16, both widths over tp, batch over dp: the student hidden
    all_gather'd and projected to the teacher's local columns; MSE plus a
    cosine term (dots and norms psum'd over tp); returns the loss and its
    gradient w.r.t. the student (check_vma=True). Bugs: norms from the
    local width (cos then pmean'd over tp), MSE as a mean over the local
    width psum'd.
10. int8 fake quantization (per-tensor symmetric, absmax scale pmax'd over
    dp and tp) of a weight over tp x dp, row-parallel product psum'd over
    tp; returns the output and the quantized weight. Bugs: scale from the
    local shard, scale pmax'd over tp only.
11. global magnitude pruning of two matrices (rows / columns over x8)
    with one threshold from a 64-bin histogram of |w| / amax: amax pmax'd,
    one_hot counts psum'd, the first bin edge whose cumulative count reaches
    60%. Bugs: histogram not psum'd (local counts against the global k),
    amax from the local shard.
12. a bf16 low-rank layer (f32 accumulation), rank over tp4, reduced by
    psum_scatter over the output dim and all_gather'd back. Bugs: gathered
    untiled and reshaped (pieces interleaved with rows), the scatter
    divided by tp.
GSPMD pairs (jax.jit with in/out shardings): 13. global magnitude pruning
of two matrices (dp x tp and tp) with one jnp.quantile threshold; 14. 2:4
sparsity with groups of 4 rows straddling shards of 6 rows (tp4); 15. the
low-rank training step of 6.; 16. the ALBERT shared-block step of 7. written
the plain way (jax.grad of the shared weights); 17. the distillation loss
and gradient of 9.; 18. the movement pruning step of 4.; 19. the fixed-mask
step of 5.; 20. the tied embedding / LM head step of 8. with the vocab over
tp; 21. int8 per-output-channel fake quantization with the channels over
tp; 22. the histogram-threshold pruning of 11. on x8.
Numerics: every correct pair agrees with its baseline at rounding level
(see "numerics"); every bug variant differs clearly.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh52.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh52.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh52.py"
C = Corpus("samples/fresh52", SCRIPT, "samples/gen/run_fresh52.sh", sys.argv[1:])
rng, R, I = seeded(5252)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
DT = {"dp": 2, "tp": 4}


def rms(x, eps=1e-6):
    return x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)


def mul(a, b):
    return a * b


# ---------------------------------------------------------------------------
# 1. global magnitude pruning, threshold by bisection on a psum'd count.
SP1 = 0.75


def bisect_threshold(count_below, hi, k, iters=40):
    """Smallest t (to 40 halvings) with at least k entries below it."""
    def body(_, lohi):
        lo, hi = lohi
        mid = 0.5 * (lo + hi)
        enough = count_below(mid) >= k
        return jnp.where(enough, lo, mid), jnp.where(enough, mid, hi)
    return lax.fori_loop(0, iters, body, (jnp.zeros_like(hi), hi))[1]


def prune_bisect_ref(w):
    a = jnp.abs(w)
    thr = bisect_threshold(lambda t: jnp.sum(a < t), jnp.max(a), int(SP1 * a.size))
    return jnp.where(a < thr, 0.0, w), thr


def prune_bisect(bug):
    def f(w):
        a = jnp.abs(w)
        if bug == "local-threshold":
            thr = bisect_threshold(lambda t: jnp.sum(a < t), jnp.max(a), int(SP1 * a.size))
        else:
            axes = "dp" if bug == "count-psum-dp-only" else ("dp", "tp")
            thr = bisect_threshold(lambda t: psum(jnp.sum(a < t), axes), pmax(jnp.max(a), ("dp", "tp")),
                                   int(SP1 * a.size * 8))
        return jnp.where(a < thr, 0.0, w), thr
    return f


C.smap("s.global_magnitude_prune_bisection.dp2xtp4", DT, prune_bisect, (P("dp", "tp"),), (P("dp", "tp"), P()),
       prune_bisect_ref, (R(32, 16),),
       bugs=[("local-threshold", ["missing-collective"]), ("count-psum-dp-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. structured output-channel pruning of a row-parallel layer.
KC = 8


def chan_prune_ref(x, w):
    norm = jnp.sqrt(jnp.sum(w * w, 0))
    m = (norm >= lax.top_k(norm, KC)[0][-1]).astype(w.dtype)
    return x @ (w * m), w * m


def chan_prune(bug):
    def f(x, w):
        sq = jnp.sum(w * w, 0)
        if bug != "norm-from-local-rows":
            sq = psum(sq, "dp" if bug == "norm-psum-over-dp" else "tp")
        norm = jnp.sqrt(sq)
        m = (norm >= lax.top_k(norm, KC)[0][-1]).astype(w.dtype)
        return psum(jnp.dot(x, w * m), "tp"), w * m
    return f


C.smap("s.channel_prune_l2_row_parallel.dp2xtp4", DT, chan_prune, (P("dp", "tp"), P("tp", None)),
       (P("dp"), P("tp", None)), chan_prune_ref, (R(8, 32), R(32, 16)),
       bugs=[("norm-from-local-rows", ["missing-collective"]), ("norm-psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. 4:8 sparsity whose groups straddle two devices (rows over tp8).


def nm_mask(g, n):
    """Keep the n largest |g| along axis -2 (the group axis)."""
    return jnp.argsort(jnp.argsort(-jnp.abs(g), axis=-2), axis=-2) < n


def nm48_ref(x, w):
    m = nm_mask(w.reshape(w.shape[0] // 8, 8, -1), 4).reshape(w.shape)
    ws = jnp.where(m, w, 0.0)
    return x @ ws, ws


def nm48(bug):
    def f(x, w):
        me = idx("tp")
        if bug == "per-shard-groups":
            m = nm_mask(w, 2)
        else:
            perm = ([(i, (i + 1) % 8) for i in range(8)] if bug == "partner-next-cyclic"
                    else [(i, i ^ 1) for i in range(8)])
            other = lax.ppermute(w, "tp", perm)
            odd = me % 2 == 1
            g = jnp.where(odd, jnp.concatenate([other, w]), jnp.concatenate([w, other]))
            off = 0 if bug == "own-half-at-zero" else (me % 2) * 4
            m = lax.dynamic_slice_in_dim(nm_mask(g, 4), off, 4, 0)
        ws = jnp.where(m, w, 0.0)
        return psum(x @ ws, "tp"), ws
    return f


C.smap("s.nm48_groups_straddle_shards.tp8", {"tp": 8}, nm48, (P(None, "tp"), P("tp")), (P(), P("tp")),
       nm48_ref, (R(4, 32), R(32, 8)),
       bugs=[("per-shard-groups", ["wrong-offset"]), ("partner-next-cyclic", ["wrong-permutation"]),
             ("own-half-at-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. movement pruning step: scores trained by straight-through, top-v mask.
KEEP4, B4 = 128, 8
OPT4 = optax.adam(1e-2)


def mv_masked(w, s, thr):
    m = (s >= thr).astype(s.dtype)
    return w * (m + (s - lax.stop_gradient(s)))


def mv_step_ref(p, st, x, t):
    thr = lax.top_k(p["s"].ravel(), KEEP4)[0][-1]
    l, g = jax.value_and_grad(lambda p: jnp.mean((x @ mv_masked(p["w"], p["s"], thr) - t) ** 2))(p)
    u, st = OPT4.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def mv_step(bug):
    def f(p, st, x, t):
        if bug == "local-threshold":
            thr = lax.top_k(p["s"].ravel(), KEEP4 // 4)[0][-1]
        else:
            allv = lax.all_gather(p["s"], "dp" if bug == "gather-over-dp" else "tp", axis=1, tiled=True)
            thr = lax.top_k(allv.ravel(), KEEP4)[0][-1]

        def loss(p):
            y = x @ mv_masked(p["w"], p["s"], thr)
            return psum(jnp.sum((y - t) ** 2), ("dp", "tp")) / (B4 * 32)
        l, g = jax.value_and_grad(loss)(p)
        u, st = OPT4.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


P4 = {"w": R(16, 32, scale=0.3), "s": R(16, 32, scale=0.1)}
SPEC4 = {"w": P(None, "tp"), "s": P(None, "tp")}
S4 = OPT4.init(P4)
SS4 = state_specs(S4, SPEC4)
C.smap("s.movement_prune_step_adam.dp2xtp4", DT, mv_step, (SPEC4, SS4, P("dp"), P("dp", "tp")), (SPEC4, SS4, P()),
       mv_step_ref, (P4, S4, R(B4, 16), R(B4, 32)),
       bugs=[("local-threshold", ["missing-collective"]), ("gather-over-dp", ["wrong-axis"])], check_vma=True)

# ---------------------------------------------------------------------------
# 5. fixed-mask sparse MLP step, the mask applied after the update.
OPT5 = optax.sgd(0.05, momentum=0.9)


def step5_ref(p, m, st, x, t):
    def loss(p):
        h = jax.nn.relu(x @ (p["w1"] * m["w1"]))
        return jnp.mean((h @ (p["w2"] * m["w2"]) - t) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    u, st = OPT5.update(g, st, p)
    return jax.tree.map(mul, optax.apply_updates(p, u), m), st, l


def step5(bug):
    def f(p, m, st, x, t):
        def loss(p):
            h = jax.nn.relu(jnp.einsum("bd,dh->bh", x, p["w1"] * m["w1"]))
            y = psum(jnp.einsum("bh,hd->bd", h, p["w2"] * m["w2"]), "tp")
            l = jnp.mean((y - t) ** 2)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, st = OPT5.update(g, st, p)
        if bug == "mask-before-update":
            p = optax.apply_updates(jax.tree.map(mul, p, m), u)
        else:
            p = jax.tree.map(mul, optax.apply_updates(p, u), m)
        return p, st, l
    return f


P5 = {"w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3)}
M5 = {k: (rng.random(v.shape) < 0.5).astype(np.float32) for k, v in P5.items()}
SPEC5 = {"w1": P(None, "tp"), "w2": P("tp", None)}
S5 = jax.tree.map(lambda a: R(*a.shape, scale=0.2) if np.ndim(a) else a, OPT5.init(P5))
SS5 = state_specs(S5, SPEC5)
C.smap("s.fixed_mask_sparse_mlp_step_momentum.dp2xtp4", DT, step5, (SPEC5, SPEC5, SS5, P("dp"), P("dp")),
       (SPEC5, SS5, P()), step5_ref, (P5, M5, S5, R(8, 16), R(8, 16)),
       bugs=[("mask-before-update", ["wrong-order"]), ("loss-psum-dp", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# 6. low-rank factorized MLP trained from scratch, rank over tp.
OPT6 = optax.adamw(3e-3, weight_decay=0.01)


def lowrank_fwd(p, x, red1, red2, gelu_first=False):
    z = (x @ p["u1"]) @ p["v1"]
    h = red1(jax.nn.gelu(z)) if gelu_first else jax.nn.gelu(red1(z))
    return red2(jnp.matmul(jnp.matmul(h, p["u2"]), p["v2"]))


def lowrank_step_ref(p, st, x, t):
    ident = lambda z: z  # noqa: E731
    l, g = jax.value_and_grad(lambda p: jnp.mean((lowrank_fwd(p, x, ident, ident) - t) ** 2))(p)
    u, st = OPT6.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def lowrank_step(bug):
    def f(p, st, x, t):
        red = lambda z: psum(z, "tp")  # noqa: E731
        red1 = (lambda z: z) if bug == "rank-not-psummed" else red

        def loss(p):
            y = lowrank_fwd(p, x, red1, red, gelu_first=bug == "psum-after-gelu")
            l = jnp.mean((y - t) ** 2)
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, st = OPT6.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


P6 = {"u1": R(16, 8, scale=0.4), "v1": R(8, 32, scale=0.4), "u2": R(32, 8, scale=0.3), "v2": R(8, 16, scale=0.4)}
SPEC6 = {"u1": P(None, "tp"), "v1": P("tp", None), "u2": P(None, "tp"), "v2": P("tp", None)}
S6 = OPT6.init(P6)
SS6 = state_specs(S6, SPEC6)
C.smap("s.lowrank_factorized_mlp_rank_over_tp.dp2xtp4", DT, lowrank_step, (SPEC6, SS6, P("dp"), P("dp")),
       (SPEC6, SS6, P()), lowrank_step_ref, (P6, S6, R(8, 16), R(8, 16)),
       bugs=[("rank-not-psummed", ["missing-collective"]), ("psum-after-gelu", ["wrong-order"]),
             ("loss-psum-dp", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# 7. ALBERT-style shared block over 3 layers, gradients of the copies summed.
L7, LR7 = 3, 0.1


def albert_fwd(ws, x, red):
    def layer(h, w):
        z = jax.nn.relu(rms(h) @ w["w1"])
        return h + red(z @ w["w2"]), None
    return lax.scan(layer, x, ws)[0]


def albert_step_ref(p, x, t):
    def loss(p):
        ws = jax.tree.map(lambda a: jnp.broadcast_to(a, (L7,) + a.shape), p)
        return jnp.mean((albert_fwd(ws, x, lambda z: z) - t) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - LR7 * b, p, g), l


def albert_step(bug):
    def f(p, x, t):
        def loss(ws):
            return pmean(jnp.mean((albert_fwd(ws, x, lambda z: psum(z, "tp")) - t) ** 2), "dp")
        copies = jax.tree.map(lambda a: jnp.stack([a] * L7), p)
        l, gs = jax.value_and_grad(loss)(copies)
        if bug == "tied-grad-first-layer-only":
            g = jax.tree.map(lambda a: a[0], gs)
        elif bug == "tied-grad-mean-over-layers":
            g = jax.tree.map(lambda a: jnp.mean(a, 0), gs)
        else:
            g = jax.tree.map(lambda a: jnp.sum(a, 0), gs)
        return jax.tree.map(lambda a, b: a - LR7 * b, p, g), l
    return f


P7 = {"w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3)}
SPEC7 = {"w1": P(None, "tp"), "w2": P("tp", None)}
C.smap("s.albert_shared_block_grad_of_copies.dp2xtp4", DT, albert_step, (SPEC7, P("dp"), P("dp")), (SPEC7, P()),
       albert_step_ref, (P7, R(8, 16), R(8, 16)),
       bugs=[("tied-grad-first-layer-only", ["wrong-scale"]), ("tied-grad-mean-over-layers", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. tied embedding / LM head, vocab over tp.
V8, D8 = 32, 16
OPT8 = optax.sgd(0.5)


def tied_loss_ref(p, tok, tgt):
    h = rms(p["emb"][tok])
    h = h + jnp.tanh(h @ p["wm"])
    lg = h @ p["emb"].T
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tgt))


def tied_step_ref(p, tok, tgt):
    l, g = jax.value_and_grad(tied_loss_ref)(p, tok, tgt)
    u, _ = OPT8.update(g, OPT8.init(p), p)
    return optax.apply_updates(p, u), l


def tied_step(bug):
    def f(p, tok, tgt):
        vl = p["emb"].shape[0]
        off = idx("tp") * vl

        def loss(q):
            loc = tok - off
            ok = (loc >= 0) & (loc < vl)
            e = jnp.where(ok[..., None], jnp.take(q["emb"], jnp.clip(loc, 0, vl - 1), axis=0), 0.0)
            h = rms(psum(e, "tp"))
            h = h + jnp.tanh(h @ q["wm"])
            lg = jnp.einsum("btd,vd->btv", h, q["head"])
            mx = pmax(lax.stop_gradient(jnp.max(lg, -1)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(lg - mx[..., None]), -1), "tp")) + mx
            tl = tgt if bug == "target-without-offset" else tgt - off
            okt = (tl >= 0) & (tl < vl)
            tlog = jnp.take_along_axis(lg, jnp.clip(tl, 0, vl - 1)[..., None], -1)[..., 0]
            tlog = psum(jnp.where(okt, tlog, 0.0), "tp")
            return pmean(jnp.mean(lse - tlog), "dp")
        l, g = jax.value_and_grad(loss)({"emb": p["emb"], "head": p["emb"], "wm": p["wm"]})
        ge = g["head"] if bug == "tied-grad-head-only" else g["emb"] + g["head"]
        gg = {"emb": ge, "wm": g["wm"]}
        u, _ = OPT8.update(gg, OPT8.init(p), p)
        return optax.apply_updates(p, u), l
    return f


SPEC8 = {"emb": P("tp", None), "wm": P()}
C.smap("s.tied_embedding_lm_head_vocab_parallel.dp2xtp4", DT, tied_step, (SPEC8, P("dp"), P("dp")), (SPEC8, P()),
       tied_step_ref, ({"emb": R(V8, D8, scale=0.5), "wm": R(D8, D8, scale=0.3)}, I(0, V8, 4, 6), I(0, V8, 4, 6)),
       bugs=[("tied-grad-head-only", ["wrong-scale"]), ("target-without-offset", ["wrong-offset"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 9. hidden-state distillation, teacher width 32, student width 16, both over tp.
B9, ALPHA9 = 8, 0.5


def distill_ref(ps, wt, x):
    ht = jax.nn.gelu(x @ wt)
    z = jax.nn.gelu(x @ ps["ws"]) @ ps["wp"]
    mse = jnp.mean((z - ht) ** 2)
    cos = jnp.sum(z * ht, -1) / jnp.sqrt(jnp.sum(z * z, -1) * jnp.sum(ht * ht, -1))
    return mse + ALPHA9 * jnp.mean(1.0 - cos)


def distill_grad_ref(ps, wt, x):
    return jax.value_and_grad(distill_ref)(ps, wt, x)


def distill(bug):
    def f(ps, wt, x):
        def loss(ps):
            ht = jax.nn.gelu(x @ wt)
            hs = lax.all_gather(jax.nn.gelu(x @ ps["ws"]), "tp", axis=1, tiled=True)
            z = hs @ ps["wp"]
            if bug == "mse-local-width-mean":
                mse = psum(jnp.mean((z - ht) ** 2), ("dp", "tp")) / 2
            else:
                mse = psum(jnp.sum((z - ht) ** 2), ("dp", "tp")) / (B9 * 32)
            dot = psum(jnp.sum(z * ht, -1), "tp")
            nz, nt = jnp.sum(z * z, -1), jnp.sum(ht * ht, -1)
            if bug == "cos-norms-local":
                cos = pmean(dot / jnp.sqrt(nz * nt), "tp")
            else:
                cos = dot / jnp.sqrt(psum(nz, "tp") * psum(nt, "tp"))
            return mse + ALPHA9 * psum(jnp.sum(1.0 - cos), "dp") / B9
        return jax.value_and_grad(loss)(ps)
    return f


SPEC9 = {"ws": P(None, "tp"), "wp": P(None, "tp")}
PS9 = {"ws": R(16, 16, scale=0.4), "wp": R(16, 32, scale=0.4)}
C.smap("s.hidden_distill_mse_cos_teacher_wider.dp2xtp4", DT, distill, (SPEC9, P(None, "tp"), P("dp")),
       (P(), SPEC9), distill_grad_ref, (PS9, R(16, 32, scale=0.4), R(B9, 16)),
       bugs=[("cos-norms-local", ["missing-collective"]), ("mse-local-width-mean", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 10. int8 fake quantization with one absmax scale over all shards.


def fq(w, amax):
    s = amax / 127.0
    return jnp.clip(jnp.round(w / s), -127, 127) * s


def fq_ref(x, w):
    wq = fq(w, jnp.max(jnp.abs(w)))
    return x @ wq, wq


def fq_sm(bug):
    def f(x, w):
        amax = jnp.max(jnp.abs(w))
        if bug != "scale-local-max":
            amax = pmax(amax, "tp" if bug == "scale-pmax-tp-only" else ("tp", "dp"))
        wq = fq(w, amax)
        return psum(x @ wq, "tp"), wq
    return f


C.smap("s.int8_fake_quant_global_absmax.tp4xdp2", {"tp": 4, "dp": 2}, fq_sm, (P(None, "tp"), P("tp", "dp")),
       (P(None, "dp"), P("tp", "dp")), fq_ref, (R(8, 32), R(32, 16)),
       bugs=[("scale-local-max", ["missing-collective"]), ("scale-pmax-tp-only", ["wrong-axis"])])


# ---------------------------------------------------------------------------
# 11. global magnitude pruning by a histogram: 64 bins of |w| / amax (amax
#     pmax'd), the counts psum'd, the threshold at the first bin edge whose
#     cumulative count reaches the target.
NB11, SP11 = 64, 0.6


def hist_threshold(a, amax, k, red=lambda c: c):
    b = jnp.clip(jnp.floor(a / amax * NB11).astype(jnp.int32), 0, NB11 - 1)
    counts = red(jnp.sum(jax.nn.one_hot(b.ravel(), NB11, dtype=jnp.int32), 0))
    first = jnp.argmax(jnp.cumsum(counts) >= k)
    return amax * first.astype(jnp.float32) / NB11


def hist_prune_ref(w1, w2):
    a1, a2 = jnp.abs(w1), jnp.abs(w2)
    amax = jnp.maximum(jnp.max(a1), jnp.max(a2))
    thr = hist_threshold(jnp.concatenate([a1.ravel(), a2.ravel()]), amax, int(SP11 * (w1.size + w2.size)))
    return w1 * (a1 >= thr), w2 * (a2 >= thr), thr


def hist_prune(bug):
    def f(w1, w2):
        a1, a2 = jnp.abs(w1), jnp.abs(w2)
        amax = jnp.maximum(jnp.max(a1), jnp.max(a2))
        if bug != "amax-local":
            amax = pmax(amax, "x")
        red = (lambda c: c) if bug == "hist-not-psummed" else (lambda c: psum(c, "x"))
        k = int(SP11 * (w1.size + w2.size) * 8)
        thr = hist_threshold(jnp.concatenate([a1.ravel(), a2.ravel()]), amax, k, red)
        return w1 * (a1 >= thr), w2 * (a2 >= thr), thr
    return f


C.smap("s.hist_threshold_prune_two_layers.x8", {"x": 8}, hist_prune, (P("x"), P(None, "x")),
       (P("x"), P(None, "x"), P()), hist_prune_ref, (R(32, 8), R(8, 64)),
       bugs=[("hist-not-psummed", ["missing-collective"]), ("amax-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. a bf16 low-rank layer (f32 accumulation) whose rank dim over tp is
#     reduced by psum_scatter over the output dim and an all_gather back.


def lowrank_bf16_ref(x, u, v):
    z = jnp.einsum("bd,dr->br", x, u, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    return jnp.einsum("br,ro->bo", z, v, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def lowrank_bf16(bug):
    def f(x, u, v):
        z = jnp.einsum("bd,dr->br", x, u, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
        y = jnp.einsum("br,ro->bo", z, v, preferred_element_type=jnp.float32)
        y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
        if bug == "scatter-mean":
            y = y / 4
        if bug == "gather-untiled-reshape":
            y = lax.all_gather(y, "tp").reshape(x.shape[0], -1)
        else:
            y = lax.all_gather(y, "tp", axis=1, tiled=True)
        return y.astype(jnp.bfloat16)
    return f


C.smap("s.lowrank_bf16_rank_reduce_scatter.tp4", {"tp": 4}, lowrank_bf16, (P(), P(None, "tp"), P("tp", None)),
       P(), lowrank_bf16_ref,
       (R(8, 16, dt=jnp.bfloat16), R(16, 8, scale=0.4, dt=jnp.bfloat16), R(8, 16, scale=0.4, dt=jnp.bfloat16)),
       bugs=[("gather-untiled-reshape", ["layout-mismatch"]), ("scatter-mean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs


def prune_two_quantile(w1, w2):
    a = jnp.concatenate([jnp.abs(w1).ravel(), jnp.abs(w2).ravel()])
    thr = jnp.quantile(a, 0.8)
    return jnp.where(jnp.abs(w1) > thr, w1, 0.0), jnp.where(jnp.abs(w2) > thr, w2, 0.0), thr


C.gspmd("g.global_prune_two_layers_quantile.dp2xtp4", DT, (P("dp", "tp"), P(None, "tp")),
        (P("dp", "tp"), P(None, "tp"), P()), prune_two_quantile, (R(32, 16), R(16, 32)))


def nm24_ref(x, w):
    m = nm_mask(w.reshape(-1, 4, w.shape[1]), 2).reshape(w.shape)
    ws = jnp.where(m, w, 0.0)
    return x @ ws, ws


C.gspmd("g.nm24_groups_straddle_rows6.tp4", {"tp": 4}, (P(None, "tp"), P("tp")), (P(), P("tp")),
        nm24_ref, (R(4, 24), R(24, 8)))
C.gspmd("g.lowrank_factorized_step.dp2xtp4", DT, (SPEC6, SS6, P("dp"), P("dp")), (SPEC6, SS6, P()),
        lowrank_step_ref, (P6, S6, R(8, 16), R(8, 16)))
C.gspmd("g.albert_shared_block_step.dp2xtp4", DT, (SPEC7, P("dp"), P("dp")), (SPEC7, P()),
        albert_step_ref, (P7, R(8, 16), R(8, 16)))
C.gspmd("g.hidden_distill_grad.dp2xtp4", DT, (SPEC9, P(None, "tp"), P("dp")), (P(), SPEC9),
        distill_grad_ref, (PS9, R(16, 32, scale=0.4), R(B9, 16)))
C.gspmd("g.movement_prune_step.dp2xtp4", DT, (SPEC4, SS4, P("dp"), P("dp", "tp")), (SPEC4, SS4, P()),
        mv_step_ref, (P4, S4, R(B4, 16), R(B4, 32)))
C.gspmd("g.fixed_mask_sparse_step.dp2xtp4", DT, (SPEC5, SPEC5, SS5, P("dp"), P("dp")), (SPEC5, SS5, P()),
        step5_ref, (P5, M5, S5, R(8, 16), R(8, 16)))

C.gspmd("g.tied_embedding_lm_head_step.dp2xtp4", DT, (SPEC8, P("dp"), P("dp")), (SPEC8, P()), tied_step_ref,
        ({"emb": R(V8, D8, scale=0.5), "wm": R(D8, D8, scale=0.3)}, I(0, V8, 4, 6), I(0, V8, 4, 6)))


def fq_per_channel(x, w):
    s = jnp.max(jnp.abs(w), 0, keepdims=True) / 127.0
    wq = jnp.clip(jnp.round(w / s), -127, 127) * s
    return jnp.dot(x, wq), wq


C.gspmd("g.int8_per_channel_fake_quant.dp2xtp4", DT, (P("dp", None), P(None, "tp")), (P("dp", "tp"), P(None, "tp")),
        fq_per_channel, (R(8, 32), R(32, 16)))
C.gspmd("g.hist_threshold_prune.x8", {"x": 8}, (P("x"), P(None, "x")), (P("x"), P(None, "x"), P()),
        hist_prune_ref, (R(32, 8), R(8, 64)))

C.finish()
