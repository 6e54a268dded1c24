"""samples/fresh36: a 36th batch of programs as a user writes them, on the
theme of dynamic sparsity and conditional computation under sharding in
JAX / optax (mixture-of-depths routing, early exit, activation top-k, N:M
weight sparsity, global magnitude pruning, RigL mask updates, block-sparse
and top-k sparse attention, ToMe token merging, sparse training steps),
none of them an idiom of samples/fresh .. fresh33, probe, train or wild.
shard_map families:
 1. mixture-of-depths block, sequence over sp4: a linear router scores each
    token, the top CAP * T tokens of the whole row go through a GELU MLP
    (scaled by the router's sigmoid), the others skip. The baseline gathers
    the chosen tokens by their top_k indices and scatters the block's
    output back; the body all_gather's the router scores along the sequence
    and keeps the tokens at or above the global k-th score. Bugs: threshold
    from the local shard with a local capacity, capacity computed from the
    local sequence length (k = CAP * T / sp applied to the global scores).
 2. early exit in a 3-layer residual MLP stack (lax.scan over stacked
    layers, hidden FFN dim over tp, batch over dp): after every layer a
    vocab-parallel exit head gives a confidence (max softmax probability,
    pmax'd maximum and psum'd denominator over tp); a token keeps the
    logits of the first layer whose confidence passes TAU (else the last).
    Bugs: confidence from the local vocab shard, maximum not pmax'd (each
    shard's exp taken at its own maximum, then psum'd).
 3. activation sparsity: per token only the top-K |activations| of the
    MLP's hidden layer (hidden over tp, tokens over dp) are kept: local
    top_k, all_gather of the candidates over tp, global K-th value as the
    threshold, row-parallel down projection psum'd. Bugs: threshold from
    the local shard (each shard keeps K), candidates all_gather'd over dp
    instead of tp.
 4. a product-key-style memory lookup: query scores against keys sharded
    over tp, a global top-k of (score, index) pairs from per-shard top_k's
    all_gather'd, softmax over the k scores and a gather of rows of a
    replicated value table at the global indices; returns the output and
    the indices. Bugs: local indices without the shard offset, the offset
    scaled by k instead of the shard's key count.
 5. 2:4 structured sparsity of a row-parallel linear layer, the input dim
    over tp (8 rows per shard, two groups of 4): in every group of 4
    consecutive input rows the 2 largest |w| are kept; returns x @ (w *
    mask) psum'd and the masked weight. Bugs: groups of stride dl / 4
    (reshape (4, dl/4, out)), groups along the output dim.
 6. global unstructured magnitude pruning of two matrices (one over
    dp x tp, one over tp on its rows) at 75% sparsity: |w| all_gather'd
    over every sharded axis, concatenated, the threshold by jnp.partition;
    returns the pruned matrices and the threshold. Bugs: threshold from the
    local shards, the first matrix gathered over tp only.
 7. RigL mask update on a layer whose output dim is over tp, batch over
    dp: the dense gradient (w.r.t. the masked weight) of an MSE loss pmean'd
    over dp, drop the K smallest
    |w| among active weights and grow the K largest |grad| among the
    inactive ones (both thresholds global over tp from per-shard top_k
    candidates); returns the new mask and weight (grown weights zeroed).
    Bugs: drop threshold from the local shard, gradient not pmean'd over dp.
 8. block-sparse causal attention with a local + strided pattern (block 2,
    query block i sees key blocks i and i-1 and every block j with j % 4
    == 3 before it), sequence over sp4, keys and values all_gather'd.
    Bugs: pattern from local query block indices, keys gathered along the
    batch axis and reshaped (mixing rows).
 9. ToMe bipartite token merging within each dp shard, hidden over tp:
    alternate tokens split into sets A / B, cosine similarity (dots and
    norms psum'd over tp), every A token's best B match, the R best-matched
    A tokens averaged into their matches; returns the reduced token set.
    Bugs: similarity from the local hidden slice, norms from the local
    slice (dots psum'd).
10. a full training step of a 2-layer MLP with 2:4 sparsity on the second
    (row-parallel) layer's input dim over tp, SR-STE straight-through
    masks recomputed from the current weights, jax.grad inside the body
    (check_vma=True), loss pmean'd over dp, optax.adam; returns parameters,
    optimizer state and the loss. Bugs: groups of stride dl / 4, loss
    psum'd over dp.
11. a full training step under FSDP (weights and their fixed pruning masks
    over fsdp on dim 0, all_gather'd where used, batch over dp x fsdp),
    masked gradients and optax.sgd with momentum (check_vma=True). Bugs:
    the mask applied after the all_gather as the local shard's mask tiled,
    the mask all_gather'd untiled on axis 1 and reshaped (rows interleaved).
12. top-k sparse attention of a few replicated queries against a KV
    sequence over sp4: per query only the KT largest scores of the whole
    sequence are kept (per-shard top_k candidates all_gather'd, global
    threshold), softmax merged by pmax and psum. Bugs: threshold from the
    local shard, denominator not psum'd.
13. block-local causal attention (query block = device block, it sees its
    own and the previous block), sequence over sp4, the left neighbour's
    keys and values by a cyclic ppermute masked on device 0 by negative
    global positions. Bugs: halo from the right neighbour, local positions.
14. early exit with lax.while_loop on standardised logits: layers run until
    every token of the global batch has exited (running count psum'd over
    dp), tokens over dp; returns logits and the layers run per token.
    Bugs: stop when the local batch is done, last layer off by one.
15. FSDP 2:4 sparsity: weight rows over fsdp4 all_gather'd, the 2:4 mask
    (lax.top_k per group) on the whole weight, the masked shard stored back
    by dynamic_slice at the row offset. Bugs: slice at 0, offset counted
    in groups.
16. activation top-K under Megatron sequence parallelism (tokens over tp
    all_gather'd, hidden over tp, global per-token threshold, down
    projection psum_scatter'd back onto tokens). Bugs: local threshold,
    psum then the first block.
17. per-output-row top-k magnitude pruning of a column-parallel layer (rows
    over tp, pruned along the unsharded input dim: no collective needed).
    Bugs: pruned per column within the local shard, output psum'd.
GSPMD pairs (jax.jit with in/out shardings): 18. the mixture-of-depths
block of 1. (top_k indices, gather and scatter-add) with the sequence over
sp4; 19. global magnitude pruning of 6. on dp x tp; 20. the 2:4 SR-STE
training step of 10. with optax.adam on dp x tp; 21. the block-sparse
attention of 8. with the sequence over sp4; 22. the activation top-K MLP
of 3. with the hidden dim over tp and tokens over dp; 23. ToMe merging of
9. on dp x tp; 24. the while-loop early exit of 14. with tokens over dp.
Numerics: every correct pair agrees with its baseline at rounding level
(f32, at most ~5e-6); every bug variant differs clearly (see "numerics";
14.'s inputs were tuned -- standardised logits, 8 layers, TAU 0.4 -- so
that devices finish at different layers; 7. takes the dense gradient, as
RigL does, since the masked one is zero wherever it could grow).
12.'s den-not-psummed divides by a zero local sum where a device keeps no
key, so its difference is inf.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh36.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh36.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh36.py"
C = Corpus("samples/fresh36", SCRIPT, "samples/gen/run_fresh36.sh", sys.argv[1:])
rng, R, I = seeded(3636)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30

# ---------------------------------------------------------------------------
# 1. mixture-of-depths, sequence over sp4.
B1, T1, D1, F1, CAP = 2, 16, 8, 16, 0.5


def mod_ref(x, wr, w1, w2):
    r = jnp.einsum("btd,d->bt", x, wr)
    k = int(CAP * x.shape[1])
    val, ids = lax.top_k(r, k)
    xs = jnp.take_along_axis(x, ids[..., None], axis=1)
    h = jax.nn.gelu(xs @ w1) @ w2 * jax.nn.sigmoid(val)[..., None]
    return x.at[jnp.arange(x.shape[0])[:, None], ids].add(h)


def mod_sp(bug):
    def f(x, wr, w1, w2):
        r = jnp.einsum("btd,d->bt", x, wr)
        tl = x.shape[1]
        if bug == "local-threshold":
            thr = lax.top_k(r, int(CAP * tl))[0][:, -1:]
        else:
            rall = lax.all_gather(r, "sp", axis=1, tiled=True)
            k = int(CAP * tl) if bug == "capacity-from-local-len" else int(CAP * rall.shape[1])
            thr = lax.top_k(rall, k)[0][:, -1:]
        go = (r >= thr)[..., None]
        h = jax.nn.gelu(x @ w1) @ w2 * jax.nn.sigmoid(r)[..., None]
        return x + jnp.where(go, h, 0.0)
    return f


MOD_ARGS = (R(B1, T1, D1), R(D1), R(D1, F1, scale=0.4), R(F1, D1, scale=0.4))
C.smap("s.mixture_of_depths_global_topk.sp4", {"sp": 4}, mod_sp, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
       mod_ref, MOD_ARGS,
       bugs=[("local-threshold", ["missing-collective"]), ("capacity-from-local-len", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. early exit, FFN hidden over tp, exit-head vocab over tp, batch over dp.
L2, D2, F2, V2, TAU = 3, 8, 16, 16, 0.3


def exit_ref(x, w1, w2, wh):
    def layer(c, w):
        h, done, out = c
        h = h + jax.nn.gelu(h @ w[0]) @ w[1]
        lg = h @ wh
        conf = jnp.max(jax.nn.softmax(lg, -1), -1)
        take = (~done) & (conf > TAU)
        out = jnp.where(take[..., None], lg, out)
        return (h, done | take, out), conf
    b, t = x.shape[:2]
    init = (x, jnp.zeros((b, t), bool), jnp.zeros((b, t, wh.shape[1])))
    (h, done, out), _ = lax.scan(layer, init, (w1, w2))
    return jnp.where(done[..., None], out, h @ wh)


def exit_tp(bug):
    def f(x, w1, w2, wh):
        def conf_of(lg):
            m = jnp.max(lg, -1, keepdims=True)
            if bug not in ("local-confidence", "max-not-pmaxed"):
                m = pmax(m, "tp")
            s = jnp.sum(jnp.exp(lg - m), -1)
            if bug != "local-confidence":
                s = psum(s, "tp")
            return 1.0 / s  # the largest probability: exp(max - max) / sum

        def layer(c, w):
            h, done, out = c
            h = h + psum(jax.nn.gelu(h @ w[0]) @ w[1], "tp")
            lg = h @ wh
            take = (~done) & (conf_of(lg) > TAU)
            return (h, done | take, jnp.where(take[..., None], lg, out)), None
        b, t = x.shape[:2]
        init = (x, jnp.zeros((b, t), bool), jnp.zeros((b, t, wh.shape[1]), x.dtype))
        (h, done, out), _ = lax.scan(layer, init, (w1, w2))
        return jnp.where(done[..., None], out, h @ wh)
    return f


C.smap("s.early_exit_confidence_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, exit_tp,
       (P("dp"), P(None, None, "tp"), P(None, "tp"), P(None, "tp")), P("dp", None, "tp"),
       exit_ref, (R(4, 4, D2), R(L2, D2, F2, scale=0.5), R(L2, F2, D2, scale=0.5), R(D2, V2, scale=0.8)),
       bugs=[("local-confidence", ["missing-all-reduce"]), ("max-not-pmaxed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 3. activation sparsity: top-K |h| per token, hidden over tp, tokens over dp.
D3, F3, K3 = 8, 32, 6


def actk_ref(x, w1, w2):
    h = jax.nn.silu(x @ w1)
    thr = lax.top_k(jnp.abs(h), K3)[0][:, -1:]
    return jnp.where(jnp.abs(h) >= thr, h, 0.0) @ w2


def actk_tp(bug):
    def f(x, w1, w2):
        h = jax.nn.silu(jnp.dot(x, w1))
        a = jnp.abs(h)
        cand = lax.top_k(a, K3)[0]
        if bug != "local-threshold":
            cand = lax.all_gather(cand, "dp" if bug == "gathered-over-dp" else "tp", axis=1, tiled=True)
        thr = lax.top_k(cand, K3)[0][:, K3 - 1:K3]
        return psum(jnp.dot(h * (a >= thr), w2), "tp")
    return f


C.smap("s.activation_topk_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, actk_tp, (P("dp"), P(None, "tp"), P("tp")), P("dp"),
       actk_ref, (R(8, D3), R(D3, F3, scale=0.5), R(F3, D3, scale=0.4)),
       bugs=[("local-threshold", ["missing-collective"]), ("gathered-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 4. product-key-style memory: keys over tp, global top-k with indices.
N4, D4, DV4, K4 = 32, 8, 8, 4


def pkm_ref(q, keys, vals):
    s = q @ keys.T
    top, ids = lax.top_k(s, K4)
    return jnp.einsum("bk,bkv->bv", jax.nn.softmax(top, -1), vals[ids]), ids


def pkm_tp(bug):
    def f(q, keys, vals):
        nl = keys.shape[0]
        s = jnp.einsum("bd,nd->bn", q, keys)
        top, ids = lax.top_k(s, K4)
        if bug == "offset-scaled-by-k":
            ids = ids + idx("tp") * K4
        elif bug != "no-shard-offset":
            ids = ids + idx("tp") * nl
        top_all = lax.all_gather(top, "tp", axis=1, tiled=True)
        ids_all = lax.all_gather(ids, "tp", axis=1, tiled=True)
        best, pos = lax.top_k(top_all, K4)
        gid = jnp.take_along_axis(ids_all, pos, axis=1)
        p = jax.nn.softmax(best, -1)
        return jnp.sum(p[..., None] * jnp.take(vals, gid, axis=0), 1), gid
    return f


C.smap("s.memory_lookup_global_topk_indices.dp2xtp4", {"dp": 2, "tp": 4}, pkm_tp, (P("dp"), P("tp"), P()),
       (P("dp"), P("dp")), pkm_ref, (R(8, D4), R(N4, D4), R(N4, DV4)),
       bugs=[("no-shard-offset", ["wrong-offset"]), ("offset-scaled-by-k", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. 2:4 sparsity of a row-parallel linear layer, input dim over tp.
DIN5, DOUT5 = 32, 16


def mask24_ranks(w):
    """2:4 along dim 0 of w (din, dout): keep the two largest |w| of every
    4 consecutive rows (ranks by a double argsort)."""
    a = jnp.abs(w).reshape(w.shape[0] // 4, 4, w.shape[1])
    rank = jnp.argsort(jnp.argsort(-a, axis=1), axis=1)
    return (rank < 2).reshape(w.shape)


def nm_ref(x, w):
    wm = w * mask24_ranks(w)
    return x @ wm, wm


def nm_tp(bug):
    def f(x, w):
        dl, do = w.shape
        a = jnp.abs(w)
        if bug == "groups-strided":
            g = a.reshape(4, dl // 4, do)
            keep = (g >= jnp.sort(g, axis=0)[2:3]).reshape(dl, do)
        elif bug == "groups-along-out-dim":
            g = a.reshape(dl, do // 4, 4)
            keep = (g >= jnp.sort(g, axis=2)[..., 2:3]).reshape(dl, do)
        else:
            g = a.reshape(dl // 4, 4, do)
            keep = (g >= jnp.sort(g, axis=1)[:, 2:3]).reshape(dl, do)
        wm = jnp.where(keep, w, 0.0)
        return psum(x @ wm, "tp"), wm
    return f


C.smap("s.nm24_rowparallel_input_dim_tp.tp4", {"tp": 4}, nm_tp, (P(None, "tp"), P("tp")), (P(), P("tp")),
       nm_ref, (R(4, DIN5), R(DIN5, DOUT5)),
       bugs=[("groups-strided", ["wrong-layout"]), ("groups-along-out-dim", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. global magnitude pruning over all shards (75% sparsity).
SP6 = 0.75


def prune_ref(w1, w2):
    allw = jnp.concatenate([jnp.abs(w1).ravel(), jnp.abs(w2).ravel()])
    thr = jnp.sort(allw)[int(SP6 * allw.size)]
    return jnp.where(jnp.abs(w1) >= thr, w1, 0), jnp.where(jnp.abs(w2) >= thr, w2, 0), thr


def prune_sm(bug):
    def f(w1, w2):
        a1, a2 = jnp.abs(w1), jnp.abs(w2)
        if bug != "local-threshold":
            a1 = lax.all_gather(a1, "tp", axis=1, tiled=True)
            if bug != "w1-gathered-over-tp-only":
                a1 = lax.all_gather(a1, "dp", axis=0, tiled=True)
            a2 = lax.all_gather(a2, "tp", axis=0, tiled=True)
        flat = jnp.concatenate([a1.reshape(-1), a2.reshape(-1)])
        kth = int(SP6 * flat.size)
        thr = jnp.partition(flat, kth)[kth]
        return w1 * (jnp.abs(w1) >= thr), w2 * (jnp.abs(w2) >= thr), thr
    return f


C.smap("s.global_magnitude_prune_threshold.dp2xtp4", {"dp": 2, "tp": 4}, prune_sm, (P("dp", "tp"), P("tp", None)),
       (P("dp", "tp"), P("tp", None), P()), prune_ref, (R(16, 16), R(16, 8, scale=0.7)),
       bugs=[("local-threshold", ["missing-collective"]), ("w1-gathered-over-tp-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. RigL mask update, output dim over tp, batch over dp.
K7 = 8


def rigl_update(w, m, g, drop_thr_of, grow_thr_of):
    act = m > 0.5
    aw = jnp.where(act, jnp.abs(w), jnp.inf)
    drop = act & (aw <= drop_thr_of(aw))
    keep = act & ~drop
    ag = jnp.where(keep, -jnp.inf, jnp.abs(g))
    grow = ag >= grow_thr_of(ag)
    newm = keep | grow
    return newm.astype(w.dtype), jnp.where(grow, 0.0, w) * newm


def rigl_ref(w, m, x, y):
    g = jax.grad(lambda we: jnp.mean(jnp.square(x @ we - y)))(w * m)  # dense gradient
    return rigl_update(w, m, g, lambda a: -lax.top_k(-a.ravel(), K7)[0][-1],
                       lambda a: lax.top_k(a.ravel(), K7)[0][-1])


def rigl_sm(bug):
    def f(w, m, x, y):
        def loss(we):
            return jnp.sum(jnp.square(x @ we - y)) / (x.shape[0] * y.shape[1] * 4)
        g = jax.grad(loss)(w * m)  # the dense gradient, also at pruned weights
        g = g if bug == "grad-not-pmeaned" else pmean(g, "dp")

        def smallest(a):
            c = -lax.top_k(-a.ravel(), K7)[0]
            if bug != "drop-threshold-local":
                c = lax.all_gather(c, "tp", tiled=True)
            return jnp.max(-lax.top_k(-c, K7)[0])

        def largest(a):
            c = lax.all_gather(lax.top_k(a.ravel(), K7)[0], "tp", tiled=True)
            return lax.top_k(c, K7)[0][-1]
        return rigl_update(w, m, g, smallest, largest)
    return f


M7 = (rng.random((16, 32)) < 0.4).astype(np.float32)
C.smap("s.rigl_drop_grow_global.dp2xtp4", {"dp": 2, "tp": 4}, rigl_sm,
       (P(None, "tp"), P(None, "tp"), P("dp"), P("dp", "tp")), (P(None, "tp"), P(None, "tp")),
       rigl_ref, (R(16, 32), M7, R(8, 16), R(8, 32)),
       bugs=[("drop-threshold-local", ["missing-collective"]), ("grad-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. block-sparse (local + strided) causal attention, sequence over sp4.
B8, T8, H8, E8, BS8, ST8 = 2, 16, 2, 4, 2, 4


def bs_allowed(qpos, kpos):
    qb, kb = qpos // BS8, kpos // BS8
    blk = (qb[:, None] - kb[None, :] <= 1) | (kb[None, :] % ST8 == ST8 - 1)
    return blk & (qpos[:, None] >= kpos[None, :])


def attn(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def bsa_ref(q, k, v):
    t = jnp.arange(q.shape[1])
    return attn(q, k, v, bs_allowed(t, t))


def bsa_sp(bug):
    def f(q, k, v):
        tl = q.shape[1]
        if bug == "keys-gathered-on-batch-axis":
            kk, vv = (lax.all_gather(a, "sp", axis=0, tiled=True).reshape(a.shape[0], -1, *a.shape[2:]) for a in (k, v))
        else:
            kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        qpos = jnp.arange(tl) if bug == "local-block-index" else idx("sp") * tl + jnp.arange(tl)
        return attn(q, kk, vv, bs_allowed(qpos, jnp.arange(kk.shape[1])))
    return f


C.smap("s.block_sparse_local_strided_attn.sp4", {"sp": 4}, bsa_sp, (P(None, "sp"),) * 3, P(None, "sp"),
       bsa_ref, tuple(R(B8, T8, H8, E8) for _ in range(3)),
       bugs=[("local-block-index", ["wrong-offset"]), ("keys-gathered-on-batch-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. ToMe bipartite merging within each dp shard, hidden over tp.
R9 = 2


def tome_merge(x, a, b, sim):
    best, dst = jnp.max(sim, -1), jnp.argmax(sim, -1)
    order = jnp.argsort(-best, axis=-1)
    src, kept = order[:, :R9], order[:, R9:]
    rows = jnp.arange(x.shape[0])[:, None]
    d = jnp.take_along_axis(dst, src, 1)
    bsum = b.at[rows, d].add(a[rows, src])
    cnt = jnp.ones(b.shape[:2], x.dtype).at[rows, d].add(1.0)
    return jnp.concatenate([a[rows, kept], bsum / cnt[..., None]], 1)


def tome_ref(x):
    a, b = x[:, ::2], x[:, 1::2]
    an = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    bn = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
    return tome_merge(x, a, b, jnp.einsum("bid,bjd->bij", an, bn))


def tome_sm(bug):
    def f(x):
        a, b = x[:, 0::2], x[:, 1::2]
        dots = jnp.einsum("bid,bjd->bij", a, b)
        na2, nb2 = jnp.sum(a * a, -1), jnp.sum(b * b, -1)
        if bug != "similarity-local":
            dots = psum(dots, "tp")
            if bug != "norms-local":
                na2, nb2 = psum(na2, "tp"), psum(nb2, "tp")
        sim = dots * lax.rsqrt(na2)[:, :, None] * lax.rsqrt(nb2)[:, None, :]
        return tome_merge(x, a, b, sim)
    return f


C.smap("s.tome_bipartite_merge_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, tome_sm, (P("dp", None, "tp"),),
       P("dp", None, "tp"), tome_ref, (R(4, 8, 16),),
       bugs=[("similarity-local", ["missing-all-reduce"]), ("norms-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. training step: 2:4 SR-STE on the row-parallel layer, optax.adam.
D10, F10 = 8, 32
OPT10 = optax.adam(1e-2)
SPEC10 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None)}


def sparse24(w, groups):
    m = lax.stop_gradient(groups(jnp.abs(w)))
    return w + lax.stop_gradient(w * m - w)  # forward masked, gradient straight through


def groups_consecutive(a):
    g = a.reshape(a.shape[0] // 4, 4, a.shape[1])
    return (g >= jnp.sort(g, axis=1)[:, 2:3]).reshape(a.shape).astype(a.dtype)


def groups_strided(a):
    g = a.reshape(4, a.shape[0] // 4, a.shape[1])
    return (g >= jnp.sort(g, axis=0)[2:3]).reshape(a.shape).astype(a.dtype)


def mlp10(p, x, groups, tp_sum=lambda y: y):
    h = jax.nn.relu(x @ p["w1"] + p["b1"])
    return tp_sum(h @ sparse24(p["w2"], groups))


def step10(p, s, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp10(p, x, groups_consecutive) - y)))(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def step10_sm(bug):
    def f(p, s, x, y):
        grp = groups_strided if bug == "groups-strided" else groups_consecutive

        def loss(p):
            l = jnp.mean(jnp.square(mlp10(p, x, grp, lambda z: psum(z, "tp")) - y))
            return psum(l, "dp") / 2 if bug != "loss-psummed-dp" else psum(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P10 = {"w1": R(D10, F10, scale=0.4), "b1": R(F10, scale=0.1), "w2": R(F10, D10, scale=0.3)}
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
C.smap("s.train_step_nm24_srste_adam.dp2xtp4", {"dp": 2, "tp": 4}, step10_sm, (SPEC10, SS10, P("dp"), P("dp")),
       (SPEC10, SS10, P()), step10, (P10, S10, R(8, D10), R(8, D10)),
       bugs=[("groups-strided", ["wrong-layout"]), ("loss-psummed-dp", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 11. training step under FSDP with fixed pruning masks, optax.sgd momentum.
D11, F11 = 16, 32
OPT11 = optax.sgd(0.05, momentum=0.9)
SPEC11 = {"w1": P("fsdp", None), "w2": P("fsdp", None)}
MSPEC11 = {"w1": P("fsdp", None), "w2": P("fsdp", None)}


def fwd11(p, m, x, gather=lambda a: a):
    w1 = gather(p["w1"] * m["w1"])
    w2 = gather(p["w2"] * m["w2"])
    return jnp.tanh(x @ w1) @ w2


def step11(p, s, m, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(fwd11(p, m, x) - y)))(p)
    g = jax.tree.map(lambda a, b: a * b, g, m)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def step11_sm(bug):
    def f(p, s, m, x, y):
        def gather(a):
            return lax.all_gather(a, "fsdp", axis=0, tiled=True)

        def fwd(p):
            if bug == "mask-tiled-from-local-shard":
                w1 = gather(p["w1"]) * jnp.tile(m["w1"], (4, 1))
                w2 = gather(p["w2"]) * jnp.tile(m["w2"], (4, 1))
                return jnp.tanh(x @ w1) @ w2
            if bug == "mask-gathered-on-axis-1":
                mg = {n: lax.all_gather(a, "fsdp", axis=1).reshape(-1, a.shape[1]) for n, a in m.items()}
                return jnp.tanh(x @ (gather(p["w1"]) * mg["w1"])) @ (gather(p["w2"]) * mg["w2"])
            return fwd11(p, m, x, gather)

        def loss(p):
            return pmean(jnp.mean(jnp.square(fwd(p) - y)), ("dp", "fsdp"))
        l, g = jax.value_and_grad(loss)(p)
        g = jax.tree.map(lambda a, b: a * b, g, m)
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P11 = {"w1": R(D11, F11, scale=0.3), "w2": R(F11, D11, scale=0.3)}
M11 = {k: (np.abs(v) > np.quantile(np.abs(v), 0.6)).astype(np.float32) for k, v in P11.items()}
S11 = OPT11.init(P11)
S11 = jax.tree.map(lambda a: a + 0.01, S11)  # a momentum already accumulated
SS11 = state_specs(S11, SPEC11)
C.smap("s.train_step_fsdp_fixed_prune_masks_sgdm.dp2xfsdp4", {"dp": 2, "fsdp": 4}, step11_sm,
       (SPEC11, SS11, MSPEC11, P(("dp", "fsdp")), P(("dp", "fsdp"))), (SPEC11, SS11, P()),
       step11, (P11, S11, M11, R(16, D11), R(16, D11)),
       bugs=[("mask-tiled-from-local-shard", ["wrong-layout"]), ("mask-gathered-on-axis-1", ["wrong-axis"])], check_vma=True)

# ---------------------------------------------------------------------------
# 12. top-k sparse attention, KV sequence over sp4, replicated queries.
KT12 = 6


def topk_attn_ref(q, k, v):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    thr = lax.top_k(s, KT12)[0][..., -1:]
    s = jnp.where(s >= thr, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def topk_attn_sp(bug):
    def f(q, k, v):
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k) * (1.0 / np.sqrt(q.shape[-1]))
        cand = lax.top_k(s, KT12)[0]
        if bug != "local-threshold":
            cand = lax.all_gather(cand, "sp", axis=3, tiled=True)
        thr = lax.top_k(cand, KT12)[0][..., -1:]
        ok = s >= thr
        m = pmax(jnp.max(jnp.where(ok, s, NEG), -1, keepdims=True), "sp")
        p = jnp.where(ok, jnp.exp(s - m), 0.0)
        num = psum(jnp.einsum("bhqk,bkhe->bqhe", p, v), "sp")
        den = jnp.sum(p, -1)
        if bug != "den-not-psummed":
            den = psum(den, "sp")
        return num / jnp.transpose(den, (0, 2, 1))[..., None]
    return f


C.smap("s.topk_sparse_attn_kv_sp.sp4", {"sp": 4}, topk_attn_sp, (P(), P(None, "sp"), P(None, "sp")), P(),
       topk_attn_ref, (R(2, 3, 2, 4), R(2, 32, 2, 4), R(2, 32, 2, 4)),
       bugs=[("local-threshold", ["missing-collective"]), ("den-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 13. block-local causal attention (block = the device's block, query block
#     i sees key blocks i - 1 and i), sequence over sp4: the left
#     neighbour's keys and values by a cyclic ppermute, masked away on
#     device 0 by their (negative) global positions.
def blocal_ref(q, k, v):
    t = jnp.arange(q.shape[1])
    bl = q.shape[1] // 4
    ok = (t[:, None] >= t[None, :]) & (t[:, None] // bl - t[None, :] // bl <= 1)
    return attn(q, k, v, ok)


def blocal_sp(bug):
    def f(q, k, v):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        perm = [(i, (i - 1) % n) for i in range(n)] if bug == "halo-from-right" else [(i, (i + 1) % n) for i in range(n)]
        kp, vp = (lax.ppermute(a, "sp", perm) for a in (k, v))
        kk, vv = jnp.concatenate([kp, k], 1), jnp.concatenate([vp, v], 1)
        base = 0 if bug == "local-positions" else me * tl
        qpos = base + jnp.arange(tl)
        kpos = base - tl + jnp.arange(2 * tl)
        ok = (kpos[None, :] >= 0) & (qpos[:, None] >= kpos[None, :])
        return attn(q, kk, vv, ok)
    return f


C.smap("s.block_local_attn_halo_ppermute.sp4", {"sp": 4}, blocal_sp, (P(None, "sp"),) * 3, P(None, "sp"),
       blocal_ref, tuple(R(2, 16, 2, 4) for _ in range(3)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("local-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. early exit with lax.while_loop: layers run until every token of the
#     global batch has exited (the count of running tokens psum'd over dp),
#     tokens over dp; returns each token's logits and the layers run.
L14, D14, V14, TAU14 = 8, 8, 8, 0.4


def ee_while_ref(x, ws, wh):
    def cond(c):
        return (c[0] < L14) & ~jnp.all(c[2])

    def body(c):
        l, h, done, out = c
        h = h + jnp.tanh(h @ ws[l])
        lg = h @ wh
        lg = lg / jnp.std(lg, -1, keepdims=True)  # logits standardised per token (temperature)
        conf = jnp.max(jax.nn.softmax(lg, -1), -1)
        take = ~done & ((conf > TAU14) | (l == L14 - 1))
        return l + 1, h, done | take, jnp.where(take[:, None], lg, out)
    c = lax.while_loop(cond, body, (jnp.int32(0), x, jnp.zeros(x.shape[0], bool), jnp.zeros((x.shape[0], V14))))
    return c[3], jnp.full(x.shape[0], c[0])  # the layers run, reported per token


def ee_while_dp(bug):
    def f(x, ws, wh):
        def running(done):
            r = jnp.sum(~done)
            return r if bug == "stop-on-local-batch" else psum(r, "dp")

        def cond(c):
            return (c[0] < L14) & (running(c[2]) > 0)

        def body(c):
            l, h, done, out = c
            h = h + jnp.tanh(jnp.dot(h, lax.dynamic_index_in_dim(ws, l, keepdims=False)))
            lg = jnp.dot(h, wh)
            lg = lg * lax.rsqrt(jnp.var(lg, -1, keepdims=True))
            conf = jnp.exp(jnp.max(lg, -1) - jax.nn.logsumexp(lg, -1))
            last = L14 - 1 if bug != "last-layer-off-by-one" else L14 - 2
            take = jnp.logical_not(done) & ((conf > TAU14) | (l == last))
            return l + 1, h, done | take, jnp.where(take[:, None], lg, out)
        c = lax.while_loop(cond, body, (jnp.int32(0), x, jnp.zeros(x.shape[0], bool), jnp.zeros((x.shape[0], V14))))
        return c[3], jnp.full(x.shape[0], c[0])
    return f


EE_ARGS = (R(16, D14), R(L14, D14, D14, scale=0.5), R(D14, V14, scale=0.9))
C.smap("s.early_exit_while_global_stop.dp4", {"dp": 4}, ee_while_dp, (P("dp"), P(), P()), (P("dp"), P("dp")),
       ee_while_ref, EE_ARGS,
       bugs=[("stop-on-local-batch", ["missing-all-reduce"]), ("last-layer-off-by-one", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 15. FSDP 2:4 sparsity: the weight's rows over fsdp4, all_gather'd, the
#     2:4 mask computed on the whole weight (lax.top_k per group), the
#     masked shard stored back by dynamic_slice at the device's row offset.
def nm_topk_mask(w):
    g = jnp.abs(w).reshape(w.shape[0] // 4, 4, w.shape[1]).transpose(0, 2, 1)
    kth = lax.top_k(g, 2)[0][..., 1:2]
    return (g >= kth).transpose(0, 2, 1).reshape(w.shape)


def fsdp_nm_ref(x, w):
    wm = jnp.where(nm_topk_mask(w), w, 0.0)
    return x @ wm, wm


def fsdp_nm(bug):
    def f(x, w):
        dl = w.shape[0]
        wf = lax.all_gather(w, "fsdp", axis=0, tiled=True)
        wm = jnp.where(nm_topk_mask(wf), wf, 0.0)
        off = 0 if bug == "slice-at-zero" else idx("fsdp") * (4 if bug == "offset-in-groups" else dl)
        return x @ wm, lax.dynamic_slice_in_dim(wm, off, dl, 0)
    return f


C.smap("s.fsdp_gathered_nm24_mask_slice_back.fsdp4", {"fsdp": 4}, fsdp_nm, (P("fsdp"), P("fsdp")), (P("fsdp"), P("fsdp")),
       fsdp_nm_ref, (R(8, 32), R(32, 16)),
       bugs=[("slice-at-zero", ["wrong-offset"]), ("offset-in-groups", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. activation top-K under Megatron sequence parallelism: tokens over tp
#     all_gather'd, hidden over tp with the global per-token threshold, the
#     down projection reduce-scattered back onto the tokens (psum_scatter).
def sp_actk(bug):
    def f(x, w1, w2):
        xf = lax.all_gather(x, "tp", axis=0, tiled=True)
        h = jax.nn.silu(xf @ w1)
        a = jnp.abs(h)
        cand = lax.top_k(a, K3)[0]
        if bug != "local-threshold":
            cand = lax.all_gather(cand, "tp", axis=1, tiled=True)
        thr = jnp.min(lax.top_k(cand, K3)[0], axis=1, keepdims=True)
        z = jnp.where(a >= thr, h, 0.0) @ w2
        if bug == "psum-then-first-block":
            return psum(z, "tp")[:x.shape[0]]
        return lax.psum_scatter(z, "tp", scatter_dimension=0, tiled=True)
    return f


C.smap("s.activation_topk_seqparallel_reduce_scatter.tp4", {"tp": 4}, sp_actk, (P("tp"), P(None, "tp"), P("tp")),
       P("tp"), actk_ref, (R(16, D3), R(D3, F3, scale=0.5), R(F3, D3, scale=0.4)),
       bugs=[("local-threshold", ["missing-collective"]), ("psum-then-first-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. per-output-neuron magnitude pruning of a column-parallel layer: every
#     output row of w (out, in) keeps its KR largest |w| along the
#     (unsharded) input dim, so no device needs another's weights; rows over
#     tp, output features over tp, no collective at all.
KR17 = 4


def rowprune_ref(x, w):
    thr = jnp.sort(jnp.abs(w), axis=1)[:, -KR17][:, None]
    wp = jnp.where(jnp.abs(w) >= thr, w, 0.0)
    return jnp.einsum("bi,oi->bo", x, wp), wp


def rowprune_tp(bug):
    def f(x, w):
        if bug == "pruned-per-column-locally":
            thr = lax.top_k(jnp.abs(w).T, KR17 // 4)[0][:, -1][None, :]
        else:
            thr = lax.top_k(jnp.abs(w), KR17)[0][:, -1:]
        wp = w * (jnp.abs(w) >= thr)
        y = jnp.einsum("bi,oi->bo", x, wp)
        return (psum(y, "tp") if bug == "output-psummed" else y), wp
    return f


C.smap("s.rowwise_topk_prune_no_collective.tp4", {"tp": 4}, rowprune_tp, (P(), P("tp")), (P(None, "tp"), P("tp")),
       rowprune_ref, (R(4, 16), R(32, 16)),
       bugs=[("pruned-per-column-locally", ["wrong-axis"]), ("output-psummed", ["extra-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 18. mixture-of-depths block (top_k indices, gather, scatter-add), sequence over sp4.
C.gspmd("g.mixture_of_depths_gather_scatter.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
        mod_ref, MOD_ARGS)

# 19. global magnitude pruning on dp x tp.
C.gspmd("g.global_magnitude_prune.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp"), P("tp", None)),
        (P("dp", "tp"), P("tp", None), P()), prune_ref, (R(16, 16), R(16, 8, scale=0.7)))

# 20. the 2:4 SR-STE training step with optax.adam on dp x tp.
C.gspmd("g.train_step_nm24_srste_adam.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS10, P("dp"), P("dp")),
        (SPEC10, SS10, P()), step10, (P10, S10, R(8, D10), R(8, D10)))

# 21. block-sparse local + strided attention, sequence over sp4.
C.gspmd("g.block_sparse_local_strided_attn.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"),
        bsa_ref, tuple(R(B8, T8, H8, E8) for _ in range(3)))

# 22. activation top-K MLP, hidden over tp, tokens over dp.
C.gspmd("g.activation_topk_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("tp")), P("dp"),
        actk_ref, (R(8, D3), R(D3, F3, scale=0.5), R(F3, D3, scale=0.4)))

# 23. ToMe merging of 9. with the batch over dp and the hidden dim over tp.
C.gspmd("g.tome_bipartite_merge.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"),), P("dp", None, "tp"),
        tome_ref, (R(4, 8, 16),))

# 24. the while-loop early exit of 14. with the tokens over dp.
C.gspmd("g.early_exit_while_loop.dp4", {"dp": 4}, (P("dp"), P(), P()), (P("dp"), P("dp")), ee_while_ref, EE_ARGS)

C.finish()
