"""samples/fresh115: a 115th batch of programs as a user writes them, on the
theme of hierarchical and byte-level sequence models in JAX (MEGABYTE-style
global / local models, hourglass transformers with shortening and
upsampling, Funnel-transformer pooling, Charformer soft block scores, byte
n-gram hash embeddings, next-byte training steps under dp, sp and dp x tp),
none of them an idiom of samples/fresh .. fresh26, probe, train or wild
(nor of fresh81, the earlier byte-level batch: the idioms here differ).
shard_map families:
 1. hourglass shortening by linear projection, sequence over sp4 (k = 4,
    8 bytes per device): the sequence shifted right by k - 1 (the last 3
    positions of the left neighbour by ppermute, zeros on device 0),
    reshaped to (n / k, k * D) and projected, a GELU MLP on the short
    sequence, upsampling by a linear projection to k * D reshaped back to
    bytes, residual. Bugs: the halo from the right neighbour, a shift by
    k instead of k - 1, the upsampled features reshaped (D, k) and
    transposed.
 2. hourglass with average pooling (k = 2) and causal attention over the
    short sequence on dp2 x sp4: shift by one (ppermute), mean over pairs,
    keys / values of the short sequence all_gather'd over sp, causal mask
    at global short positions, upsampling by jnp.repeat. Bugs: no halo
    (zeros at every device start), keys gathered over dp, the mask at
    local positions.
 3. Funnel-transformer encoder, two pooling stages by strided slicing
    (x[:, ::2]) of the queries, keys / values the unpooled all_gather'd
    sequence, key padding mask from per-row lengths, sequence over sp4.
    Bugs: the key mask built from local positions and then gathered, the
    stride starting at the odd position, stage 2's keys not gathered.
 4. Charformer GBST soft block scores over block sizes 1, 2, 4 on sp2 x
    tp4 (hidden over tp): block means by reshape, a score vector whose dot
    is psum'd over tp, scores upsampled by repeat, softmax over block
    sizes, weighted sum, then downsampling by 2. Bugs: score not psum'd,
    the softmax over positions, the score psum'd over sp.
 5. byte n-gram hash embeddings (n = 2, 3, 4, polynomial hash of bytes + 1
    mod 64 buckets) on sp4 x tp2: the halo from an all_gather of the whole
    byte row, zero-padded by 3 and dynamic_slice'd at the device's offset;
    hash tables with rows over tp (masked lookups + psum). Bugs: the
    window one byte late, the bucket taken modulo the local table size,
    no psum over tp.
 6. MEGABYTE global model with Ulysses-style attention over patches on
    sp4: patch embeddings shifted right by one patch (ppermute, a learned
    pad patch on device 0), heads all_to_all'd against the patch sequence,
    causal attention over all patches, all_to_all back, output projection.
    Bugs: the shift from the next device, keys / values all_gather'd over
    the sequence with head 0 taken on every device.
 7. MEGABYTE local model as a tanh RNN within each patch (lax.scan over
    the 4 bytes of a patch, initial state from the patch's global context),
    next-byte cross-entropy, bytes over dp2 x sp4; loss psum'd over both
    axes. Bugs: the carry running across patches (scan over the flattened
    block), the loss reduced over sp only, the global context taken from
    the previous patch (ppermute).
 8. a diagonal linear recurrence over patches (h_t = a h_{t-1} + x_t) on
    sp4: a local lax.associative_scan, then the carry from earlier devices
    from the all_gather'd block ends decayed by a^(block * distance) and
    a^(t + 1). Bugs: the carry not decayed within the block, an inclusive
    carry (own block included), a decay exponent one block too long.
 9. a next-byte training step on sp4 (check_vma=False): byte embedding,
    causal depthwise conv (kernel 3, a 2-token halo by a cyclic ppermute
    zeroed on device 0), GELU MLP, LM head; targets from the right
    neighbour, the row end masked; jax.value_and_grad locally, gradients
    and loss psum'd over sp, optax.sgd. Bugs: gradients pmean'd, targets
    from the left neighbour, the halo not zeroed on device 0.
10. an hourglass byte LM training step on dp2 x tp4 (check_vma=True):
    shift + linear shortening, a Megatron MLP on the short sequence (tp),
    linear upsampling, vocab-parallel cross-entropy (pmax of a
    stop_gradient, psum of exp sums, masked target logit psum'd), loss
    pmean'd over dp, jax.grad and optax.adamw. Bugs: the local max in the
    log-sum-exp (its loss then pmean'd over (dp, tp), as it varies over
    tp), the target without the vocab offset, the loss psum'd over dp.
11. hourglass in bf16 with the shift after shortening (k = 4, sp4): mean
    pooling, a bf16 dot with f32 accumulation, the short sequence shifted
    right by one short token (its last from the left neighbour by
    ppermute), upsampling by repeat, residual. Bugs: the short shift from
    the right neighbour, no short shift, upsampling by tile.
12. hourglass shortening by lax.reduce_window (sum * 0.5, stride 2) on
    sp2 x tp4: the shift by one from the all_gather'd, zero-padded sequence
    dynamic_slice'd at the device's offset, a Megatron MLP on the short
    sequence whose partial sums are psum_scatter'd over tp along the hidden
    dim and all_gather'd back, upsampling by repeat. Bugs: the slice one
    position late (no shift), the scattered sums divided by tp.
13. MEGABYTE patch embedding, bytes over sp4 (16 per device, patches of
    4): byte embeddings reshaped to (patches, 4 * De), projected, then an
    all_to_all from patch-sharded to hidden-sharded (output P(None, None,
    sp)). Bugs: a byte-major reshape (patches strided across the block),
    the patch embeddings psum'd over sp before the all_to_all.
14. a next-byte loss on dp2 x tp4 with the head replicated over tp: the
    logits "synchronised" by psum over tp / axis_size (a no-op on equal
    copies), the summed NLL psum'd over (dp, tp) and divided by tp as well.
    Bugs: the logits psum'd without the division, the tp copies counted
    (no division by tp).
GSPMD pairs (jax.jit with in/out shardings): 15. the hourglass linear
shortening of 1. (sp4); 16. GBST of 4. with the hidden over tp and the
batch over dp (dp2 x tp4); 17. the hourglass training step of 10. under
its dp x tp shardings; 18. the linear recurrence of 8. as one
lax.associative_scan over a sequence sharded over sp4; 19. the n-gram
hash embedding of 5. with its tables over tp and bytes over sp (sp4 x
tp2); 20. the reduce_window hourglass of 12. (sp2 x tp4); 21. the patch
embedding of 13. with its output's hidden over sp (sp4).
Numerics: see the manifest ("numerics"); every correct pair agrees with its
baseline at rounding level, every bug variant differs clearly.
Exported with scalify_jax.export_pair. Run from the repository root:
bash samples/gen/run_fresh115.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh115.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh115.py"
C = Corpus("samples/fresh115", SCRIPT, "samples/gen/run_fresh115.sh", sys.argv[1:])
rng, R, I = seeded(11515)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def fwd_perm(n):
    return [(i, i + 1) for i in range(n - 1)]


def bwd_perm(n):
    return [(i, i - 1) for i in range(1, n)]


# ---------------------------------------------------------------------------
# 1. hourglass shortening by linear projection (k = 4), sequence over sp4.
K1, T1, D1 = 4, 32, 8


def hg_linear(x, ws, wm, wu):
    b, t, d = x.shape
    xs = jnp.pad(x, ((0, 0), (K1 - 1, 0), (0, 0)))[:, :t]
    s = xs.reshape(b, t // K1, K1 * d) @ ws
    s = s + jax.nn.gelu(s @ wm)
    return x + (s @ wu).reshape(b, t, d)


def hg_linear_sp(bug):
    def f(x, ws, wm, wu):
        b, tl, d = x.shape
        if bug == "shift-by-k":
            halo = lax.ppermute(x[:, -K1:], "sp", fwd_perm(4))
            xs = jnp.concatenate([halo, x[:, :tl - K1]], 1)
        else:
            perm = bwd_perm(4) if bug == "halo-from-right" else fwd_perm(4)
            halo = lax.ppermute(x[:, -(K1 - 1):], "sp", perm)
            xs = jnp.concatenate([halo, x[:, :tl - (K1 - 1)]], 1)
        s = xs.reshape(b, tl // K1, K1 * d) @ ws
        s = s + jax.nn.gelu(s @ wm)
        u = s @ wu
        if bug == "upsample-reshape-transposed":
            u = u.reshape(b, tl // K1, d, K1).transpose(0, 1, 3, 2)
        return x + u.reshape(b, tl, d)
    return f


ARGS1 = (R(2, T1, D1), R(K1 * D1, D1, scale=0.2), R(D1, D1, scale=0.3), R(D1, K1 * D1, scale=0.3))
C.smap("s.hourglass_shift_linear_shorten.sp4", {"sp": 4}, hg_linear_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), hg_linear, ARGS1,
       bugs=[("halo-from-right", ["wrong-permutation"]), ("shift-by-k", ["wrong-offset"]),
             ("upsample-reshape-transposed", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# 2. hourglass with average pooling (k = 2) and causal attention over the
#    short sequence, dp2 x sp4.
T2, D2, H2 = 16, 8, 2


def mha(q, k, v, ok):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def hg_pool_attn(x, wq, wk, wv, wo):
    b, t, d = x.shape
    xs = jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], 1)
    s = xs.reshape(b, t // 2, 2, d).mean(2)
    q, k, v = (jnp.einsum("bnd,dhe->bnhe", s, w) for w in (wq, wk, wv))
    n = t // 2
    o = mha(q, k, v, jnp.tril(jnp.ones((n, n), bool)))
    return x + jnp.repeat(jnp.einsum("bnhe,hed->bnd", o, wo), 2, axis=1)


def hg_pool_attn_sp(bug):
    def f(x, wq, wk, wv, wo):
        b, tl, d = x.shape
        me = idx("sp")
        halo = jnp.zeros_like(x[:, -1:]) if bug == "no-halo" else lax.ppermute(x[:, -1:], "sp", fwd_perm(4))
        xs = jnp.concatenate([halo, x[:, :-1]], 1)
        s = xs.reshape(b, tl // 2, 2, d).mean(2)
        q, k, v = (jnp.einsum("bnd,dhe->bnhe", s, w) for w in (wq, wk, wv))
        ax = "dp" if bug == "keys-gathered-over-dp" else "sp"
        kk, vv = (lax.all_gather(a, ax, axis=1, tiled=True) for a in (k, v))
        nl = tl // 2
        qpos = jnp.arange(nl) if bug == "mask-local-positions" else me * nl + jnp.arange(nl)
        o = mha(q, kk, vv, qpos[:, None] >= jnp.arange(kk.shape[1])[None, :])
        return x + jnp.repeat(jnp.einsum("bnhe,hed->bnd", o, wo), 2, axis=1)
    return f


C.smap("s.hourglass_avgpool_short_causal_attn.dp2xsp4", {"dp": 2, "sp": 4}, hg_pool_attn_sp,
       (P("dp", "sp"), P(), P(), P(), P()), P("dp", "sp"), hg_pool_attn,
       (R(4, T2, D2), R(D2, H2, 4, scale=0.4), R(D2, H2, 4, scale=0.4), R(D2, H2, 4, scale=0.4),
        R(H2, 4, D2, scale=0.4)),
       bugs=[("no-halo", ["missing-collective"]), ("keys-gathered-over-dp", ["wrong-collective-group"]),
             ("mask-local-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Funnel-transformer encoder: two stages of query pooling by striding,
#    keys / values the unpooled sequence, key padding mask, sequence over sp4.
T3, D3 = 32, 8
LENS3 = np.array([27, 19], np.int32)


def funnel_stage(h, valid, w, stride_from=0):
    q = h[:, stride_from::2]
    s = (q @ w[0]) @ (h @ w[1]).transpose(0, 2, 1) / np.sqrt(h.shape[-1])
    s = jnp.where(valid[:, None, :], s, NEG)
    return q + (jax.nn.softmax(s, -1) @ (h @ w[2])) @ w[3]


def funnel(x, lens, w):
    valid = jnp.arange(x.shape[1])[None, :] < lens[:, None]
    h = funnel_stage(x, valid, w[0])
    return funnel_stage(h, valid[:, ::2], w[1])


def funnel_sp(bug):
    def f(x, lens, w):
        tl = x.shape[1]
        me = idx("sp")
        sf = 1 if bug == "stride-from-odd" else 0

        def stage(h, gpos, w, gather=True):
            hh = lax.all_gather(h, "sp", axis=1, tiled=True) if gather else h
            if bug == "key-mask-local-positions":
                valid = lax.all_gather(jnp.arange(h.shape[1])[None, :] < lens[:, None], "sp", axis=1, tiled=True)
            elif gather:
                valid = gpos[None, :] < lens[:, None]
            else:
                valid = gpos[None, me * h.shape[1] + jnp.arange(h.shape[1])] < lens[:, None]
            q = h[:, sf::2]
            s = (q @ w[0]) @ (hh @ w[1]).transpose(0, 2, 1) / np.sqrt(h.shape[-1])
            s = jnp.where(valid[:, None, :], s, NEG)
            return q + (jax.nn.softmax(s, -1) @ (hh @ w[2])) @ w[3]
        h = stage(x, jnp.arange(T3), w[0])
        # stage-1 token i stands at byte 2 i (its padding flag is that byte's)
        return stage(h, 2 * jnp.arange(T3 // 2), w[1], gather=bug != "stage2-keys-local")
    return f


C.smap("s.funnel_stride_pool_two_stages_padmask.sp4", {"sp": 4}, funnel_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), funnel, (R(2, T3, D3), LENS3, R(2, 4, D3, D3, scale=0.35)),
       bugs=[("key-mask-local-positions", ["wrong-offset"]), ("stride-from-odd", ["wrong-offset"]),
             ("stage2-keys-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. Charformer GBST soft block scores over block sizes 1, 2, 4, sp2 x tp4.
T4, D4 = 16, 16
BLOCKS = (1, 2, 4)


def gbst(x, w):
    b, t, d = x.shape
    outs, scores = [], []
    for s in BLOCKS:
        blk = x.reshape(b, t // s, s, d).mean(2)
        outs.append(jnp.repeat(blk, s, 1))
        scores.append(jnp.repeat(blk @ w, s, 1))
    p = jax.nn.softmax(jnp.stack(scores, -1), -1)
    y = jnp.einsum("btk,kbtd->btd", p, jnp.stack(outs))
    return y.reshape(b, t // 2, 2, d).mean(2)


def gbst_sm(bug):
    def f(x, w):
        b, tl, d = x.shape
        outs, scores = [], []
        for s in BLOCKS:
            blk = jnp.mean(jnp.reshape(x, (b, tl // s, s, d)), axis=2)
            sc = jnp.einsum("bnd,d->bn", blk, w)
            if bug == "score-psummed-over-sp":
                sc = psum(sc, ("sp", "tp"))
            elif bug != "score-not-psummed":
                sc = psum(sc, "tp")
            outs.append(jnp.repeat(blk, s, 1))
            scores.append(jnp.repeat(sc, s, 1))
        sc = jnp.stack(scores, -1)
        p = jax.nn.softmax(sc, 1) if bug == "softmax-over-positions" else jax.nn.softmax(sc, -1)
        y = jnp.einsum("btk,kbtd->btd", p, jnp.stack(outs))
        return y.reshape(b, tl // 2, 2, d).mean(2)
    return f


ARGS4 = (R(2, T4, D4), R(D4, scale=0.5))
C.smap("s.charformer_gbst_block_scores.sp2xtp4", {"sp": 2, "tp": 4}, gbst_sm, (P(None, "sp", "tp"), P("tp")),
       P(None, "sp", "tp"), gbst, ARGS4,
       bugs=[("score-not-psummed", ["missing-all-reduce"]), ("softmax-over-positions", ["wrong-axis"]),
             ("score-psummed-over-sp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. byte n-gram hash embeddings, sp4 x tp2, tables' rows over tp.
T5, D5, NB5 = 32, 8, 64


def ngram_ids(win, t):
    """win: bytes + 1 with 3 zero-padded (or halo) positions in front."""
    ids = []
    for n in (2, 3, 4):
        h = sum(win[:, 3 - i:3 - i + t] * (31 ** i) for i in range(n))
        ids.append(h)
    return ids


def ngram_embed(b, emb, tables):
    win = jnp.pad(b + 1, ((0, 0), (3, 0)))
    out = emb[b]
    for j, h in enumerate(ngram_ids(win, b.shape[1])):
        out = out + tables[j][h % NB5]
    return out


def ngram_embed_sm(bug):
    def f(b, emb, tables):
        tl = b.shape[1]
        me, r = idx("sp"), idx("tp")
        nl = tables.shape[1]
        row = jnp.pad(lax.all_gather(b, "sp", axis=1, tiled=True) + 1, ((0, 0), (3, 0)))
        start = me * tl + (1 if bug == "window-one-late" else 0)
        win = lax.dynamic_slice_in_dim(row, start, tl + 3, axis=1)
        out = jnp.take(emb, b, axis=0)
        acc = jnp.zeros_like(out)
        for j, h in enumerate(ngram_ids(win, tl)):
            bucket = h % (nl if bug == "local-modulus" else NB5)
            loc = bucket - r * nl
            ok = (loc >= 0) & (loc < nl)
            acc = acc + jnp.where(ok[..., None], tables[j][jnp.clip(loc, 0, nl - 1)], 0.0)
        return out + (acc if bug == "no-psum-tp" else psum(acc, "tp"))
    return f


ARGS5 = (I(0, 256, 2, T5), R(256, D5, scale=0.5), R(3, NB5, D5, scale=0.5))
C.smap("s.byte_ngram_hash_embed_gather_window.sp4xtp2", {"sp": 4, "tp": 2}, ngram_embed_sm,
       (P(None, "sp"), P(), P(None, "tp")), P(None, "sp"), ngram_embed, ARGS5,
       bugs=[("window-one-late", ["wrong-offset"]), ("local-modulus", ["wrong-offset"]),
             ("no-psum-tp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. MEGABYTE global model with Ulysses all_to_all over patches, sp4.
NP6, D6, H6, E6 = 16, 16, 4, 4


def mb_global(pe, pad, wq, wk, wv, wo):
    x = jnp.concatenate([jnp.broadcast_to(pad, (pe.shape[0], 1, pe.shape[2])), pe[:, :-1]], 1)
    q, k, v = (jnp.einsum("bnd,dhe->bnhe", x, w) for w in (wq, wk, wv))
    o = mha(q, k, v, jnp.tril(jnp.ones((NP6, NP6), bool)))
    return jnp.einsum("bnhe,hed->bnd", o, wo)


def mb_global_sp(bug):
    def f(pe, pad, wq, wk, wv, wo):
        me = idx("sp")
        perm = bwd_perm(4) if bug == "shift-from-next" else fwd_perm(4)
        prev = lax.ppermute(pe[:, -1:], "sp", perm)
        first = jnp.where(me == 0, jnp.broadcast_to(pad, prev.shape), prev)
        x = jnp.concatenate([first, pe[:, :-1]], 1)
        q, k, v = (jnp.einsum("bnd,dhe->bnhe", x, w) for w in (wq, wk, wv))
        q = lax.all_to_all(q, "sp", 2, 1, tiled=True)
        if bug == "kv-head0-everywhere":
            k, v = (lax.all_gather(a, "sp", axis=1, tiled=True)[:, :, :1] for a in (k, v))
        else:
            k, v = (lax.all_to_all(a, "sp", 2, 1, tiled=True) for a in (k, v))
        o = mha(q, k, v, jnp.tril(jnp.ones((NP6, NP6), bool)))
        o = lax.all_to_all(o, "sp", 1, 2, tiled=True)
        return jnp.einsum("bnhe,hed->bnd", o, wo)
    return f


C.smap("s.megabyte_global_patch_shift_ulysses_a2a.sp4", {"sp": 4}, mb_global_sp,
       (P(None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"), mb_global,
       (R(2, NP6, D6), R(D6), R(D6, H6, E6, scale=0.3), R(D6, H6, E6, scale=0.3), R(D6, H6, E6, scale=0.3),
        R(H6, E6, D6, scale=0.3)),
       bugs=[("shift-from-next", ["wrong-permutation"]), ("kv-head0-everywhere", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. MEGABYTE local model: tanh RNN within each patch, next-byte CE, dp2 x sp4.
PS7, T7, D7, V7 = 4, 32, 8, 32


def local_rnn_logits(b, g, emb, wg, wx, wh, wout):
    """b (B, n, PS) bytes, g (B, n, D) global context per patch."""
    x = emb[b]
    x = jnp.concatenate([jnp.zeros_like(x[:, :, :1]), x[:, :, :-1]], 2)  # shift within the patch
    h0 = jnp.tanh(g @ wg)

    def step(h, xt):
        h = jnp.tanh(xt @ wx + h @ wh)
        return h, h
    _, hs = lax.scan(step, h0, jnp.moveaxis(x, 2, 0))
    return jnp.moveaxis(hs, 0, 2) @ wout


def mb_local(b, g, emb, wg, wx, wh, wout):
    bb = b.reshape(b.shape[0], -1, PS7)
    lg = local_rnn_logits(bb, g, emb, wg, wx, wh, wout)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, bb))


def mb_local_sm(bug):
    def f(b, g, emb, wg, wx, wh, wout):
        bl, tl = b.shape
        if bug == "ctx-from-previous-patch":
            prev = lax.ppermute(g[:, -1:], "sp", fwd_perm(4))
            g = jnp.concatenate([prev, g[:, :-1]], 1)
        if bug == "carry-across-patches":
            x = emb[b]
            first = (jnp.arange(tl) % PS7) == 0
            x = jnp.where(first[None, :, None], 0.0, jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], 1))
            _, hs = lax.scan(lambda h, xt: (jnp.tanh(xt @ wx + h @ wh),) * 2, jnp.tanh(g[:, 0] @ wg),
                             jnp.swapaxes(x, 0, 1))
            lg = jnp.swapaxes(hs, 0, 1) @ wout
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, b)
        else:
            bb = b.reshape(bl, tl // PS7, PS7)
            ce = optax.softmax_cross_entropy_with_integer_labels(local_rnn_logits(bb, g, emb, wg, wx, wh, wout), bb)
        n = T7 * 4
        if bug == "loss-over-sp-only":
            return psum(jnp.sum(ce), "sp") / (n / 2)
        return psum(jnp.sum(ce), ("dp", "sp")) / n
    return f


C.smap("s.megabyte_local_rnn_scan_within_patch.dp2xsp4", {"dp": 2, "sp": 4}, mb_local_sm,
       (P("dp", "sp"), P("dp", "sp"), P(), P(), P(), P(), P()), P(), mb_local,
       (I(0, V7, 4, T7), R(4, T7 // PS7, D7), R(V7, D7, scale=0.6), R(D7, D7, scale=0.5), R(D7, D7, scale=0.5),
        R(D7, D7, scale=0.5), R(D7, V7, scale=0.6)),
       bugs=[("carry-across-patches", ["wrong-offset"]), ("loss-over-sp-only", ["wrong-collective-group"]),
             ("ctx-from-previous-patch", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. diagonal linear recurrence over patches, sp4.
N8, D8 = 32, 8


def lin_rec(x, a):
    def step(h, xt):
        h = a * h + xt
        return h, h
    _, hs = lax.scan(step, jnp.zeros_like(x[:, 0]), jnp.swapaxes(x, 0, 1))
    return jnp.swapaxes(hs, 0, 1)


def lin_rec_sp(bug):
    def f(x, a):
        tl = x.shape[1]
        me = idx("sp")

        def comb(l, r):
            return l[0] * r[0], r[0] * l[1] + r[1]
        _, h = lax.associative_scan(comb, (jnp.broadcast_to(a, x.shape), x), axis=1)
        ends = lax.all_gather(h[:, -1], "sp")  # (4, B, D)
        j = jnp.arange(4)
        before = (j <= me) if bug == "inclusive-carry" else (j < me)
        dist = (me - j) if bug == "decay-one-block-long" else (me - 1 - j)
        w = jnp.where(before[:, None, None], a[None, None, :] ** (tl * jnp.maximum(dist, 0))[:, None, None], 0.0)
        carry = jnp.sum(w * ends, 0)  # (B, D)
        if bug == "carry-not-decayed":
            return h + carry[:, None]
        return h + a ** (jnp.arange(tl) + 1)[:, None] * carry[:, None]
    return f


C.smap("s.patch_linear_recurrence_assoc_scan_carry.sp4", {"sp": 4}, lin_rec_sp, (P(None, "sp"), P()),
       P(None, "sp"), lin_rec, (R(2, N8, D8), rng.uniform(0.8, 0.97, D8).astype(np.float32)),
       bugs=[("carry-not-decayed", ["wrong-scale"]), ("inclusive-carry", ["wrong-offset"]),
             ("decay-one-block-long", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. next-byte training step on sp4 with manual gradient psum, optax.sgd.
T9, D9, V9 = 32, 8, 32
OPT9 = optax.sgd(0.1)


def byte_lm_logits(p, xwin, nh):
    """xwin: embeddings with nh halo positions in front (zeros before byte 0)."""
    t = xwin.shape[1] - nh
    y = sum(p["conv"][i] * xwin[:, nh - i:nh - i + t] for i in range(3))
    x = xwin[:, nh:]
    h = x + jax.nn.gelu(y @ p["w1"])
    return h @ p["head"]


def step9(p, tok):
    def loss(p):
        x = p["emb"][tok]
        lg = byte_lm_logits(p, jnp.pad(x, ((0, 0), (2, 0), (0, 0))), 2)[:, :-1]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT9.update(g, OPT9.init(p), p)
    return optax.apply_updates(p, u), l


def step9_sm(bug):
    def f(p, tok):
        b, tl = tok.shape
        me = idx("sp")
        halo = lax.ppermute(tok[:, -2:], "sp", [(i, (i + 1) % 4) for i in range(4)])
        tperm = [(i, (i + 1) % 4) for i in range(4)] if bug == "targets-from-left" else \
            [(i, (i - 1) % 4) for i in range(4)]
        nxt = lax.ppermute(tok[:, :1], "sp", tperm)
        tgt = jnp.concatenate([tok[:, 1:], nxt], 1)
        ok = ~((me == 3) & (jnp.arange(tl) == tl - 1))

        def loss(p):
            xh = p["emb"][halo]
            if bug != "halo-not-zeroed":
                xh = jnp.where(me == 0, 0.0, xh)
            lg = byte_lm_logits(p, jnp.concatenate([xh, p["emb"][tok]], 1), 2)
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, tgt)
            return jnp.sum(jnp.where(ok[None], ce, 0.0)) / (b * (4 * tl - 1))
        l, g = jax.value_and_grad(loss)(p)
        g = jax.tree.map(lambda x: pmean(x, "sp") if bug == "grads-pmeaned" else psum(x, "sp"), g)
        u, _ = OPT9.update(g, OPT9.init(p), p)
        return optax.apply_updates(p, u), psum(l, "sp")
    return f


P9 = {"emb": R(V9, D9, scale=0.6), "conv": R(3, D9, scale=0.5), "w1": R(D9, D9, scale=0.4),
      "head": R(D9, V9, scale=0.4)}
SP9 = {k: P() for k in P9}
C.smap("s.byte_lm_conv_train_step_sgd.sp4", {"sp": 4}, step9_sm, (SP9, P(None, "sp")), (SP9, P()), step9,
       (P9, I(0, V9, 2, T9)),
       bugs=[("grads-pmeaned", ["wrong-scale"]), ("targets-from-left", ["wrong-permutation"]),
             ("halo-not-zeroed", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. hourglass byte LM training step on dp2 x tp4 (check_vma=True), adamw.
T10, D10, F10, V10 = 16, 16, 32, 64
OPT10 = optax.adamw(1e-2, weight_decay=0.05)
SPEC10 = {"emb": P(), "ws": P(), "w1": P(None, "tp"), "w2": P("tp", None), "wu": P(), "head": P(None, "tp")}


def hg_hidden(p, tok, tp_sum=lambda y: y):
    x = p["emb"][tok]
    b, t, d = x.shape
    xs = jnp.concatenate([jnp.zeros_like(x[:, :1]), x[:, :-1]], 1)
    s = xs.reshape(b, t // 2, 2 * d) @ p["ws"]
    s = s + tp_sum(jax.nn.gelu(s @ p["w1"]) @ p["w2"])
    return x + (s @ p["wu"]).reshape(b, t, d)


def step10(p, s, tok):
    def loss(p):
        lg = (hg_hidden(p, tok) @ p["head"])[:, :-1]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step10_sm(bug):
    def f(p, s, tok):
        r = idx("tp")

        def loss(p):
            lg = (hg_hidden(p, tok, lambda y: psum(y, "tp")) @ p["head"])[:, :-1]
            vl = lg.shape[-1]
            if bug == "local-max-in-lse":
                m = lax.stop_gradient(jnp.max(lg, -1, keepdims=True))
            else:
                m = pmax(lax.stop_gradient(jnp.max(lg, -1, keepdims=True)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(lg - m), -1, keepdims=True), "tp")) + m
            tgt = tok[:, 1:] - (0 if bug == "target-without-offset" else r * vl)
            hit = jnp.arange(vl)[None, None, :] == tgt[..., None]
            tl = psum(jnp.sum(jnp.where(hit, lg, 0.0), -1, keepdims=True), "tp")
            ce = jnp.mean(lse - tl)
            if bug == "loss-psummed-over-dp":
                return psum(ce, "dp")
            if bug == "local-max-in-lse":  # ce now varies over tp too
                return pmean(ce, ("dp", "tp"))
            return pmean(ce, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P10 = {"emb": R(V10, D10, scale=0.5), "ws": R(2 * D10, D10, scale=0.2), "w1": R(D10, F10, scale=0.25),
       "w2": R(F10, D10, scale=0.2), "wu": R(D10, 2 * D10, scale=0.25), "head": R(D10, V10, scale=0.3)}
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
TOK10 = I(0, V10, 4, T10)
C.smap("s.hourglass_byte_lm_vocab_parallel_adamw.dp2xtp4", {"dp": 2, "tp": 4}, step10_sm, (SPEC10, SS10, P("dp")),
       (SPEC10, SS10, P()), step10, (P10, S10, TOK10),
       bugs=[("local-max-in-lse", ["wrong-value"]), ("target-without-offset", ["wrong-offset"]),
             ("loss-psummed-over-dp", ["wrong-collective-op"])], check_vma=True)

# ---------------------------------------------------------------------------
# 11. hourglass in bf16 with the shift after shortening (k = 4), sp4.
K11, T11, D11 = 4, 32, 8


def hg_bf16(x, w):
    b, t, d = x.shape
    s = x.reshape(b, t // K11, K11, d).mean(2)
    s = jax.nn.gelu(lax.dot_general(s, w, (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32))
    s = s.astype(jnp.bfloat16)
    s = jnp.concatenate([jnp.zeros_like(s[:, :1]), s[:, :-1]], 1)
    return x + jnp.repeat(s, K11, axis=1)


def hg_bf16_sp(bug):
    def f(x, w):
        b, tl, d = x.shape
        s = x.reshape(b, tl // K11, K11, d).mean(2)
        s = jax.nn.gelu(lax.dot_general(s, w, (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32))
        s = s.astype(jnp.bfloat16)
        if bug != "no-short-shift":
            perm = bwd_perm(4) if bug == "short-shift-from-right" else fwd_perm(4)
            s = jnp.concatenate([lax.ppermute(s[:, -1:], "sp", perm), s[:, :-1]], 1)
        u = jnp.tile(s, (1, K11, 1)) if bug == "upsample-by-tile" else jnp.repeat(s, K11, axis=1)
        return x + u
    return f


C.smap("s.hourglass_bf16_shift_after_shorten_repeat.sp4", {"sp": 4}, hg_bf16_sp, (P(None, "sp"), P()),
       P(None, "sp"), hg_bf16, (R(2, T11, D11, dt=jnp.bfloat16), R(D11, D11, scale=0.4, dt=jnp.bfloat16)),
       bugs=[("short-shift-from-right", ["wrong-permutation"]), ("no-short-shift", ["missing-collective"]),
             ("upsample-by-tile", ["wrong-reshape-order"])])


# ---------------------------------------------------------------------------
# 12. hourglass shortening by lax.reduce_window, sp2 x tp4: the shift by one
#     from an all_gather'd sequence dynamic_slice'd one position early, a
#     Megatron MLP on the short sequence whose partial sums are
#     psum_scatter'd over the hidden dim and all_gather'd back, repeat.
T12, D12, F12 = 16, 16, 32


def hg_rw(x, w1, w2):
    b, t, d = x.shape
    xs = jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :t]
    s = lax.reduce_window(xs, 0.0, lax.add, (1, 2, 1), (1, 2, 1), "VALID") * 0.5
    s = s + jax.nn.relu(s @ w1) @ w2
    return x + jnp.repeat(s, 2, axis=1)


def hg_rw_sm(bug):
    def f(x, w1, w2):
        b, tl, d = x.shape
        me = idx("sp")
        row = jnp.pad(lax.all_gather(x, "sp", axis=1, tiled=True), ((0, 0), (1, 0), (0, 0)))
        xs = lax.dynamic_slice_in_dim(row, me * tl + (1 if bug == "no-shift" else 0), tl, axis=1)
        s = lax.reduce_window(xs, 0.0, lax.add, (1, 2, 1), (1, 2, 1), "VALID") * 0.5
        part = jax.nn.relu(s @ w1) @ w2
        red = lax.psum_scatter(part, "tp", scatter_dimension=2, tiled=True)
        if bug == "scatter-averaged":
            red = red / 4
        s = s + lax.all_gather(red, "tp", axis=2, tiled=True)
        return x + jnp.repeat(s, 2, axis=1)
    return f


ARGS12 = (R(2, T12, D12), R(D12, F12, scale=0.3), R(F12, D12, scale=0.3))
C.smap("s.hourglass_reduce_window_scatter_gather_mlp.sp2xtp4", {"sp": 2, "tp": 4}, hg_rw_sm,
       (P(None, "sp"), P(None, "tp"), P("tp", None)), P(None, "sp"), hg_rw, ARGS12,
       bugs=[("no-shift", ["wrong-offset"]), ("scatter-averaged", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. MEGABYTE patch embedding, bytes over sp4 (16 per device, patches of 4):
#     byte embeddings reshaped to (patches, 4 * De) and projected, then an
#     all_to_all from patch-sharded to hidden-sharded for the global model.
T13, P13, DE13, D13, V13 = 64, 4, 4, 16, 256


def patch_embed(b, emb, w):
    x = emb[b]
    return x.reshape(b.shape[0], -1, P13 * DE13) @ w


def patch_embed_sm(bug):
    def f(b, emb, w):
        x = emb[b]
        bl, tl, de = x.shape
        if bug == "byte-major-reshape":
            x = x.reshape(bl, P13, tl // P13, de).transpose(0, 2, 1, 3)
        pe = x.reshape(bl, tl // P13, P13 * de) @ w
        if bug == "psum-before-a2a":
            pe = psum(pe, "sp")
        return lax.all_to_all(pe, "sp", 2, 1, tiled=True)
    return f


ARGS13 = (I(0, V13, 2, T13), R(V13, DE13, scale=0.5), R(P13 * DE13, D13, scale=0.3))
C.smap("s.megabyte_patch_embed_a2a_to_hidden.sp4", {"sp": 4}, patch_embed_sm, (P(None, "sp"), P(), P()),
       P(None, None, "sp"), patch_embed, ARGS13,
       bugs=[("byte-major-reshape", ["wrong-reshape-order"]), ("psum-before-a2a", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 14. a next-byte loss on dp2 x tp4 whose head is replicated over tp: the
#     logits synchronised by a defensive pmean over tp (a no-op on equal
#     copies), the loss summed over (dp, tp) and divided by tp too.
T14, D14, V14 = 8, 16, 32


def byte_loss14(h, head, tok):
    lg = jax.nn.log_softmax(h[:, :-1] @ head, -1)
    return -jnp.mean(jnp.take_along_axis(lg, tok[:, 1:, None], -1))


def byte_loss14_sm(bug):
    def f(h, head, tok):
        lg = h[:, :-1] @ head
        lg = psum(lg, "tp") if bug == "logits-psummed" else psum(lg, "tp") / lax.axis_size("tp")
        lg = jax.nn.log_softmax(lg, -1)
        nll = -jnp.sum(jnp.take_along_axis(lg, tok[:, 1:, None], -1))
        n = 4 * (T14 - 1)
        tot = psum(nll, ("dp", "tp"))
        return tot / n if bug == "tp-copies-counted" else tot / (n * 4)
    return f


C.smap("s.byte_loss_replicated_head_defensive_pmean.dp2xtp4", {"dp": 2, "tp": 4}, byte_loss14_sm,
       (P("dp"), P(), P("dp")), P(), byte_loss14, (R(4, T14, D14), R(D14, V14, scale=0.4), I(0, V14, 4, T14)),
       bugs=[("logits-psummed", ["wrong-scale"]), ("tp-copies-counted", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.hourglass_shift_linear_shorten.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
        hg_linear, ARGS1)
C.gspmd("g.charformer_gbst_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("tp")),
        P("dp", None, "tp"), gbst, ARGS4)
C.gspmd("g.hourglass_byte_lm_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS10, P("dp")), (SPEC10, SS10, P()),
        step10, (P10, S10, TOK10))


def lin_rec_assoc(x, a):
    _, h = lax.associative_scan(lambda l, r: (l[0] * r[0], r[0] * l[1] + r[1]),
                                (jnp.broadcast_to(a, x.shape), x), axis=1)
    return h


C.gspmd("g.patch_linear_recurrence_assoc_scan.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"),
        lin_rec_assoc, (R(2, N8, D8), rng.uniform(0.8, 0.97, D8).astype(np.float32)))
C.gspmd("g.byte_ngram_hash_embed.sp4xtp2", {"sp": 4, "tp": 2}, (P(None, "sp"), P(), P(None, "tp")),
        P(None, "sp"), ngram_embed, ARGS5)

C.gspmd("g.hourglass_reduce_window_mlp.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(None, "tp"), P("tp", None)), P(None, "sp"), hg_rw, ARGS12)
C.gspmd("g.megabyte_patch_embed.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, None, "sp"), patch_embed, ARGS13)

C.finish()
