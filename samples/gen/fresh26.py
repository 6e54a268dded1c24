"""samples/fresh26: a 26th batch of programs as a user writes them, on the
theme of the details of modern transformer training steps under FSDP x TP x
sequence parallelism: packed sequences, rotary variants, GQA/MQA with more
tensor-parallel ranks than kv heads, QK-norm, vocab-parallel losses with
z-loss and label smoothing, clipping by the global norm, and a full
optax.adamw step of a tiny 2-layer decoder.
shard_map families:
 1. packed rows with the sequence over sp, position ids restarting per
    document computed on device: the previous token's segment id from the
    left neighbour (ppermute), a lax.cummax of document starts, and the start
    of a document begun on an earlier device from an all_gather of the
    blocks' last starts; YaRN (NTK-by-parts) partial rotary embeddings at
    those positions. Bugs: local token index (no axis_index offset), no
    carry from earlier blocks (documents restart at every shard), the
    previous segment taken from the right neighbour.
 2. document-masked causal attention on packed rows, sequence over sp, the
    segment ids built from begin-of-document flags as a local cumsum plus
    an exclusive prefix of all_gather'd per-device document counts; keys,
    values and segment ids all_gather'd. Bugs: local segment ids (no
    prefix), an inclusive prefix.
 3. next-token loss on packed rows, sequence over sp: a block's last target
    is the next block's first token (cyclic ppermute to the left), masked at
    document ends and at the row end; mean over valid targets as psum/psum.
    Bugs: shift the wrong way, row end left unmasked (it wraps to token 0,
    whose segment id the inputs make equal), pmean of local means.
 4. causal attention with YaRN partial RoPE, sequence over sp, rotated keys
    all_gather'd. Bugs: keys gathered first and rotated at tiled local
    positions, causal mask from local query positions.
 5. GQA with 8 query heads over tp4 and 2 kv heads whose projections are
    replicated; rank r picks kv head r // (tp / n_kv) by dynamic_slice;
    output projection psum'd; batch over dp. Bugs: kv head r % n_kv, ratio
    taken from the query heads (r // (n_q / n_kv)).
 6. MQA with per-head QK-norm, heads over tp, the per-head query gains
    passed replicated and sliced at the rank's head offset. Bugs: gains
    sliced at offset 0, output projection not psum'd.
 7. vocab-parallel cross-entropy with z-loss and label smoothing and its
    gradient by jax.value_and_grad inside the body (check_vma=True; the
    maximum pmax'd of a stop_gradient), vocab over tp, batch over dp, loss
    pmean'd over dp. Bugs: z-loss on the local log-sum-exp (the loss then
    pmean'd over (dp, tp), which check_vma needs), smoothing mean over the
    local vocabulary size, target index without the vocab offset.
 8. clipping by the global norm over mixed shardings (a matrix over
    (dp, tp), a vector over tp, an FSDP-only matrix over dp, a replicated
    gain), returning the clipped tree and the norm. Bugs: the matrix's
    squares psum'd over tp only, the replicated leaf psum'd over all axes.
 9. Megatron sequence parallelism around RMSNorm + MLP (tp4): norm on the
    sequence block, all_gather along the sequence, column/row-parallel
    projections, psum_scatter back. Bugs: psum then the first block taken
    (offset 0), the reduce-scatter divided by tp.
10. a full training step of a 2-layer decoder (YaRN partial RoPE causal
    attention, GELU MLP) under FSDP x TP with check_vma=True: weight
    matrices over tp and over dp on their other dim (all_gather'd where
    used; their gradients reduce-scattered by the transpose), gains and
    embedding replicated; loss pmean'd over dp; jax.grad; the global norm
    from per-leaf squared sums psum'd over each leaf's sharded axes;
    clipping; optax.adamw with a weight-decay mask (no decay on gains and
    the embedding) applied shard-wise; returns parameters, optimizer state
    and the norm. Bugs: loss not pmean'd over dp (gradients and norm twice
    as large), replicated leaves psum'd over all axes in the norm. (A first
    draft's bug "norm psum'd over tp only" leaves the norm dp-varying, which
    check_vma rejects at the P() output; replaced.)
11. sliding-window causal attention (window 3) on packed rows, sequence over
    sp: the last 2 keys, values and segment ids of the left neighbour by
    ppermute. Bugs: the halo's segment ids taken from the own block, a
    window one longer.
12. one-token decoding against a KV cache with the sequence over sp, keys
    rotated on the fly with NTK-aware scaled frequencies (6 of 8 dims) at
    global cache positions, per-row cache lengths, softmax merged by pmax
    and psum. Bugs: local cache positions, denominator not psum'd.
GSPMD pairs (jax.jit with in/out shardings): 13. packed rows over sp with
restarting positions, YaRN partial RoPE and the document-masked causal
attention; 14. the z-loss / label-smoothed vocab-parallel loss of 7. with
its gradient (dp2 x tp4); 15. the packed next-token loss of 3. with its
gradient in the head (sp4); 16. the training step of 10. with the
parameters under FSDP x TP shardings and with_sharding_constraint on the
activations the Megatron way (residual stream with its sequence over tp,
attention outputs with heads over tp); 17. GQA with 8 query heads over
tp8 and 2 replicated kv heads jnp.repeat'ed and constrained to the query
heads' sharding, with per-head QK-norm.
Left out, as idioms of earlier batches: the OLMo-2 full-projection QK-norm
and GQA on a two-axis kv x g mesh (fresh12: here one axis, kv head by
axis_index // ratio), ring attention with segment masks (fresh8), learned
sinks (fresh12).
Numerics: every correct pair agrees with its baseline at rounding level
(f32, within a few 1e-6); every bug variant differs clearly (see
"numerics"). Masks fill with -1e30, not -inf, so no fully masked row meets
exp(-inf - -inf). Nothing was dropped for its numerics; two first-draft
bug variants were changed because check_vma rejected them (7.'s z-loss
bug, now with a pmean over (dp, tp), and 10.'s second bug).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh26.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh26.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh26.py"
C = Corpus("samples/fresh26", SCRIPT, "samples/gen/run_fresh26.sh", sys.argv[1:])
rng, R, I = seeded(2626)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def attention(q, k, v, ok=None):
    """q (b, q, h, e), k / v (b, k, h, e); ok broadcasts against (b, h, q, k)."""
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    if ok is not None:
        s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def rms(x, g=None, eps=1e-6):
    y = x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + eps)
    return y if g is None else y * g


def yarn_inv_freq(rot, base=10000.0, factor=4.0, orig_len=8, beta_fast=32.0, beta_slow=1.0):
    """YaRN (NTK-by-parts) inverse frequencies of rot rotary dims and the
    attention scale 0.1 ln(factor) + 1, as in the Hugging Face rope utils."""
    pos_freqs = base ** (np.arange(0, rot, 2) / rot)
    extra, inter = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr_dim(nrot):
        return (rot * np.log(orig_len / (nrot * 2 * np.pi))) / (2 * np.log(base))
    lo = max(np.floor(corr_dim(beta_fast)), 0)
    hi = min(np.ceil(corr_dim(beta_slow)), rot - 1)
    ramp = np.clip((np.arange(rot // 2) - lo) / max(hi - lo, 1e-3), 0, 1)
    mask = 1 - ramp
    inv = inter * (1 - mask) + extra * mask
    return inv.astype(np.float32), float(0.1 * np.log(factor) + 1.0)


def rope(x, pos, inv, mscale=1.0):
    """Partial rotary embedding (rotate-half) on the first 2*len(inv) dims of
    x (b, t, h, e) at integer positions pos (b, t); the rest passes through."""
    rot = 2 * inv.shape[0]
    ang = pos[..., None].astype(jnp.float32) * inv
    cos, sin = (jnp.cos(ang) * mscale)[:, :, None], (jnp.sin(ang) * mscale)[:, :, None]
    xr, xp = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    r = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    return jnp.concatenate([r, xp], -1)


def doc_positions(seg):
    """Position ids restarting at every document of a packed row: t minus
    the index where t's document starts (seg (b, t) segment ids)."""
    t = jnp.arange(seg.shape[1])
    first = jnp.concatenate([jnp.ones_like(seg[:, :1], bool), seg[:, 1:] != seg[:, :-1]], 1)
    return t - lax.cummax(jnp.where(first, t, 0), axis=1)


def packed_segs(b, t, lens):
    """Segment ids of b packed rows of t tokens: documents of the given
    lengths cycled (so documents straddle shard boundaries)."""
    out = np.zeros((b, t), np.int32)
    for r in range(b):
        s, i, n = 0, 0, r
        while i < t:
            L = lens[n % len(lens)]
            out[r, i:i + L] = s
            i, s, n = i + L, s + 1, n + 1
    return out


B, T, H, E = 2, 16, 4, 8
SEG = packed_segs(B, T, [5, 3, 6, 2, 7])
INV, MSC = yarn_inv_freq(4)  # 4 of 8 head dims rotary

# ---------------------------------------------------------------------------
# 1. packed rows, sequence over sp: each device derives the position ids
#    (restarting per document) of its block -- the previous token's segment
#    from the left neighbour by ppermute, the start of a document begun on an
#    earlier device from an all_gather of the blocks' last document starts --
#    and applies YaRN partial rotary embeddings at those positions.


def packed_rope(bug):
    def f(x, seg):
        n, tl = 4, seg.shape[1]
        me = idx("sp")
        t = jnp.arange(tl) if bug == "local-token-index" else me * tl + jnp.arange(tl)
        perm = [(i, i - 1) for i in range(1, n)] if bug == "prev-from-right" else [(i, i + 1) for i in range(n - 1)]
        prev = lax.ppermute(seg[:, -1:], "sp", perm)
        prev = jnp.where(me == 0, -1, prev)
        first = jnp.concatenate([prev, seg[:, :-1]], 1) != seg
        start = lax.cummax(jnp.where(first, t, 0), axis=1)
        if bug != "no-carry-from-earlier-blocks":
            last = lax.all_gather(start[:, -1], "sp")  # (n, b)
            carry = jnp.max(jnp.where((jnp.arange(n) < me)[:, None], last, 0), 0)
            start = jnp.maximum(start, carry[:, None])
        return rope(x, t - start, INV, MSC)
    return f


C.smap("s.packed_rope_positions_restart.sp4", {"sp": 4}, packed_rope, (P(None, "sp"), P(None, "sp")), P(None, "sp"),
       lambda x, seg: rope(x, doc_positions(seg), INV, MSC), (R(B, T, H, E), SEG),
       bugs=[("local-token-index", ["wrong-offset"]), ("no-carry-from-earlier-blocks", ["missing-collective"]),
             ("prev-from-right", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 2. document-masked causal attention on packed rows, sequence over sp, the
#    segment ids built on device from begin-of-document flags: a local
#    cumsum plus the number of documents begun on earlier devices (an
#    exclusive prefix of the all_gather'd counts); keys, values and their
#    segment ids all_gather'd.


def bos_of(seg):
    return np.concatenate([np.ones_like(seg[:, :1]), (seg[:, 1:] != seg[:, :-1]).astype(np.int32)], 1)


def docmask_attn(q, k, v, bos):
    seg = jnp.cumsum(bos, 1)
    ok = (seg[:, :, None] == seg[:, None, :]) & jnp.tril(jnp.ones((q.shape[1],) * 2, bool))
    return attention(q, k, v, ok[:, None])


def docmask_cp(bug):
    def f(q, k, v, bos):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        counts = lax.all_gather(bos.sum(1), "sp")  # (n, b)
        before = (jnp.arange(n) <= me) if bug == "inclusive-prefix" else (jnp.arange(n) < me)
        seg = jnp.cumsum(bos, 1)
        if bug != "local-segment-ids":
            seg = seg + jnp.sum(jnp.where(before[:, None], counts, 0), 0)[:, None]
        kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        kseg = lax.all_gather(seg, "sp", axis=1, tiled=True)
        qpos = me * tl + jnp.arange(tl)
        ok = (seg[:, :, None] == kseg[:, None, :]) & (qpos[:, None] >= jnp.arange(n * tl)[None, :])
        return attention(q, kk, vv, ok[:, None])
    return f


C.smap("s.packed_docmask_cumsum_segids.sp4", {"sp": 4}, docmask_cp, (P(None, "sp"),) * 4, P(None, "sp"),
       docmask_attn, (R(B, T, H, E), R(B, T, H, E), R(B, T, H, E), bos_of(SEG)),
       bugs=[("local-segment-ids", ["wrong-offset"]), ("inclusive-prefix", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. next-token loss on packed rows, sequence over sp: the target of a
#    block's last token is the next block's first token (ppermute to the
#    left), masked where the document ends there and at the row's end;
#    the mean over valid targets as psum / psum.
V = 32


def packed_loss(h, w, tok, seg):
    logits = jnp.einsum("btd,dv->btv", h, w)[:, :-1]
    ok = (seg[:, 1:] == seg[:, :-1]).astype(jnp.float32)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, tok[:, 1:])
    return jnp.sum(ce * ok) / jnp.sum(ok)


def packed_loss_sp(bug):
    def f(h, w, tok, seg):
        n = 4
        me = idx("sp")
        perm = [(i, (i + 1) % n) for i in range(n)] if bug == "shift-wrong-way" else [(i, (i - 1) % n) for i in range(n)]
        nxt_tok = lax.ppermute(tok[:, :1], "sp", perm)
        nxt_seg = lax.ppermute(seg[:, :1], "sp", perm)
        tgt = jnp.concatenate([tok[:, 1:], nxt_tok], 1)
        tseg = jnp.concatenate([seg[:, 1:], nxt_seg], 1)
        ok = tseg == seg
        if bug != "row-end-not-masked":
            ok = ok & ~((me == n - 1) & (jnp.arange(seg.shape[1]) == seg.shape[1] - 1))
        ok = ok.astype(jnp.float32)
        ce = optax.softmax_cross_entropy_with_integer_labels(jnp.einsum("btd,dv->btv", h, w), tgt)
        if bug == "mean-of-local-means":
            return pmean(jnp.sum(ce * ok) / jnp.sum(ok), "sp")
        return psum(jnp.sum(ce * ok), "sp") / psum(jnp.sum(ok), "sp")
    return f


# the last document of each row gets the id of the first (ids are only
# compared as neighbours), so a row end left unmasked (it wraps to token 0) shows.
SEG3 = packed_segs(B, T, [9, 4, 3])
SEG3[:, -3:] = SEG3[:, 0:1]
C.smap("s.packed_nexttoken_loss_boundary_mask.sp4", {"sp": 4}, packed_loss_sp,
       (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")), P(), packed_loss,
       (R(B, T, 16), R(16, V, scale=0.5), I(0, V, B, T), SEG3),
       bugs=[("shift-wrong-way", ["wrong-permutation"]), ("row-end-not-masked", ["wrong-offset"]),
             ("mean-of-local-means", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 4. causal attention with YaRN partial rotary embeddings, sequence over
#    sp: queries and keys rotated at positions axis_index * block + t, the
#    rotated keys and the values all_gather'd.


def yarn_causal(q, k, v):
    pos = jnp.broadcast_to(jnp.arange(q.shape[1]), q.shape[:2])
    q, k = rope(q, pos, INV, MSC), rope(k, pos, INV, MSC)
    return attention(q, k, v, jnp.tril(jnp.ones((q.shape[1],) * 2, bool)))


def yarn_cp(bug):
    def f(q, k, v):
        tl = q.shape[1]
        me = idx("sp")
        pos = jnp.broadcast_to(me * tl + jnp.arange(tl), q.shape[:2])
        q = rope(q, pos, INV, MSC)
        if bug == "keys-rotated-after-gather":
            kk = lax.all_gather(k, "sp", axis=1, tiled=True)
            kk = rope(kk, jnp.tile(pos, (1, 4)), INV, MSC)
        else:
            kk = lax.all_gather(rope(k, pos, INV, MSC), "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        qpos = (jnp.arange(tl) if bug == "mask-local-query-pos" else me * tl + jnp.arange(tl))
        return attention(q, kk, vv, (qpos[:, None] >= jnp.arange(4 * tl)[None, :]))
    return f


C.smap("s.yarn_partial_rope_causal_allgather.sp4", {"sp": 4}, yarn_cp, (P(None, "sp"),) * 3, P(None, "sp"),
       yarn_causal, (R(B, T, H, E), R(B, T, H, E), R(B, T, H, E)),
       bugs=[("keys-rotated-after-gather", ["wrong-offset"]), ("mask-local-query-pos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. GQA with more tp ranks than kv heads: 8 query heads over tp4 (two per
#    rank), 2 kv heads whose projections are replicated; rank r takes kv
#    head r // (tp / n_kv) with a dynamic_slice; the output projection rows
#    of its query heads, psum over tp. Batch over dp.
D5, HQ, HKV = 16, 8, 2


def gqa_layer(x, wq, wk, wv, wo):
    q = jnp.einsum("btd,dhe->bthe", x, wq)
    k = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wk), HQ // HKV, 2)
    v = jnp.repeat(jnp.einsum("btd,dhe->bthe", x, wv), HQ // HKV, 2)
    o = attention(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
    return jnp.einsum("bthe,hed->btd", o, wo)


def gqa_tp(bug):
    def f(x, wq, wk, wv, wo):
        tp = 4
        me = idx("tp")
        if bug == "kv-head-mod":
            kvh = me % HKV
        elif bug == "ratio-from-query-heads":
            kvh = me // (HQ // HKV)
        else:
            kvh = me // (tp // HKV)
        wk1 = lax.dynamic_slice_in_dim(wk, kvh, 1, 1)
        wv1 = lax.dynamic_slice_in_dim(wv, kvh, 1, 1)
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        k = jnp.einsum("btd,dhe->bthe", x, wk1)
        v = jnp.einsum("btd,dhe->bthe", x, wv1)
        k, v = (jnp.broadcast_to(a, q.shape) for a in (k, v))
        o = attention(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
        return psum(jnp.einsum("bthe,hed->btd", o, wo), "tp")
    return f


C.smap("s.gqa_tp_exceeds_kv_heads.dp2xtp4", {"dp": 2, "tp": 4}, gqa_tp,
       (P("dp"), P(None, "tp"), P(), P(), P("tp")), P("dp"), gqa_layer,
       (R(4, 8, D5), R(D5, HQ, E, scale=0.3), R(D5, HKV, E, scale=0.3), R(D5, HKV, E, scale=0.3),
        R(HQ, E, D5, scale=0.3)),
       bugs=[("kv-head-mod", ["wrong-offset"]), ("ratio-from-query-heads", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. MQA with per-head QK-norm, heads over tp: one kv head (replicated
#    projection), the query norm's per-head gains passed replicated and
#    sliced at the rank's head offset, the key norm's gain shared; output
#    projection psum'd.


def mqa_qknorm(x, wq, wk, wv, wo, gq, gk):
    q = rms(jnp.einsum("btd,dhe->bthe", x, wq), gq)
    k = rms(jnp.einsum("btd,de->bte", x, wk), gk)[:, :, None]
    v = jnp.einsum("btd,de->bte", x, wv)[:, :, None]
    k, v = (jnp.broadcast_to(a, q.shape) for a in (k, v))
    o = attention(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
    return jnp.einsum("bthe,hed->btd", o, wo)


def mqa_tp(bug):
    def f(x, wq, wk, wv, wo, gq, gk):
        hl = wq.shape[1]
        off = 0 if bug == "gain-at-offset-0" else idx("tp") * hl
        q = rms(jnp.einsum("btd,dhe->bthe", x, wq), lax.dynamic_slice_in_dim(gq, off, hl, 0))
        k = rms(jnp.einsum("btd,de->bte", x, wk), gk)[:, :, None]
        v = jnp.einsum("btd,de->bte", x, wv)[:, :, None]
        k, v = (jnp.broadcast_to(a, q.shape) for a in (k, v))
        o = attention(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
        y = jnp.einsum("bthe,hed->btd", o, wo)
        return y if bug == "no-output-psum" else psum(y, "tp")
    return f


C.smap("s.mqa_qknorm_heads_tp.tp4", {"tp": 4}, mqa_tp,
       (P(), P(None, "tp"), P(), P(), P("tp"), P(), P()), P(), mqa_qknorm,
       (R(2, 8, D5), R(D5, HQ, E, scale=0.3), R(D5, E, scale=0.3), R(D5, E, scale=0.3), R(HQ, E, D5, scale=0.3),
        1.0 + R(HQ, E, scale=0.3), 1.0 + R(E, scale=0.3)),
       bugs=[("gain-at-offset-0", ["wrong-offset"]), ("no-output-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. vocab-parallel cross-entropy with z-loss and label smoothing, vocab over
#    tp, batch over dp, and its gradient (jax.grad inside the body,
#    check_vma=True): the maximum pmax'd under stop_gradient, the
#    log-sum-exp from the psum'd exponentials, the target logit by a masked
#    psum at the rank's vocab offset, the smoothing term the psum'd logit
#    sum over the full vocabulary; the loss pmean'd over dp.
V7, D7, EPS, ZC = 64, 16, 0.1, 1e-2


def ce_zloss(h, w, y):
    def loss(w):
        lg = jnp.einsum("btd,dv->btv", h, w)
        lse = jax.nn.logsumexp(lg, -1)
        tgt = jnp.take_along_axis(lg, y[..., None], -1)[..., 0]
        tok = lse - (1 - EPS) * tgt - EPS * jnp.mean(lg, -1) + ZC * jnp.square(lse)
        return jnp.mean(tok)
    return jax.value_and_grad(loss)(w)


def ce_zloss_tp(bug):
    def f(h, w, y):
        def loss(w):
            vl = w.shape[1]
            lg = jnp.einsum("btd,dv->btv", h, w)
            m = pmax(lax.stop_gradient(lg.max(-1)), "tp")
            lse = jnp.log(psum(jnp.exp(lg - m[..., None]).sum(-1), "tp")) + m
            off = idx("tp") * vl
            loc = y - off if bug != "target-without-offset" else y
            hit = (loc >= 0) & (loc < vl)
            tgt = psum(jnp.where(hit, jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0], 0.0),
                       "tp")
            smooth = psum(lg.sum(-1), "tp") / (vl if bug == "smoothing-over-local-vocab" else V7)
            zl = jax.nn.logsumexp(lg, -1) if bug == "zloss-on-local-logits" else lse
            tok = lse - (1 - EPS) * tgt - EPS * smooth + ZC * jnp.square(zl)
            if bug == "zloss-on-local-logits":  # tp-varying now: averaged over tp to get past check_vma
                return pmean(jnp.mean(tok), ("dp", "tp"))
            return pmean(jnp.mean(tok), "dp")
        return jax.value_and_grad(loss)(w)
    return f


C.smap("s.vocab_ce_zloss_smoothing_grad.dp2xtp4", {"dp": 2, "tp": 4}, ce_zloss_tp, (P("dp"), P(None, "tp"), P("dp")),
       (P(), P(None, "tp")), ce_zloss, (R(4, 6, D7), R(D7, V7, scale=0.5), I(0, V7, 4, 6)),
       bugs=[("zloss-on-local-logits", ["missing-all-reduce"]), ("smoothing-over-local-vocab", ["wrong-offset"]),
             ("target-without-offset", ["wrong-offset"])], check_vma=True)

# ---------------------------------------------------------------------------
# 8. gradient clipping by the global norm over mixed FSDP x TP shardings: a
#    matrix over (dp, tp), a vector over tp, a matrix over dp (FSDP only),
#    a replicated gain; each leaf's squared sum psum'd over the axes it is
#    sharded on, the replicated one counted once; the clipped gradients and
#    the norm returned (the norm is what a user logs).


def clip_ref(g):
    n = optax.global_norm(g)
    return jax.tree.map(lambda x: x * jnp.minimum(1.0, 1.0 / n), g), n


def clip_sharded(bug):
    def f(g):
        axes = {"w_in": ("dp", "tp"), "b": ("tp",), "w_emb": ("dp",), "gain": ()}
        if bug == "matrix-norm-over-tp-only":
            axes["w_in"] = ("tp",)
        if bug == "replicated-leaf-psummed":
            axes["gain"] = ("dp", "tp")
        sq = sum(psum(jnp.sum(jnp.square(g[k])), a) if a else jnp.sum(jnp.square(g[k])) for k, a in axes.items())
        n = jnp.sqrt(sq)
        return jax.tree.map(lambda x: x * jnp.minimum(1.0, 1.0 / n), g), n
    return f


G8 = {"w_in": P("dp", "tp"), "b": P("tp"), "w_emb": P("dp"), "gain": P()}
C.smap("s.clip_global_norm_fsdp_tp_mixed.dp2xtp4", {"dp": 2, "tp": 4}, clip_sharded, (G8,), (G8, P()), clip_ref,
       ({"w_in": R(8, 16, scale=0.2), "b": R(16, scale=0.2), "w_emb": R(8, 4, scale=0.2), "gain": R(16, scale=0.2)},),
       bugs=[("matrix-norm-over-tp-only", ["wrong-collective-group"]),
             ("replicated-leaf-psummed", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. Megatron sequence parallelism around an RMSNorm + MLP block (tp4): the
#    norm on the device's sequence block, all_gather over tp along the
#    sequence, column-parallel up projection, row-parallel down projection,
#    psum_scatter back to sequence blocks, residual added.


def sp_mlp(x, g, w1, w2):
    return x + jnp.einsum("btf,fd->btd", jax.nn.gelu(jnp.einsum("btd,df->btf", rms(x, g), w1)), w2)


def sp_mlp_tp(bug):
    def f(x, g, w1, w2):
        hg = lax.all_gather(rms(x, g), "tp", axis=1, tiled=True)
        y = jnp.einsum("btf,fd->btd", jax.nn.gelu(jnp.einsum("btd,df->btf", hg, w1)), w2)
        if bug == "psum-then-first-block":
            y = psum(y, "tp")[:, :x.shape[1]]
        else:
            y = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)
            if bug == "scatter-averaged":
                y = y / 4
        return x + y
    return f


C.smap("s.megatron_sp_rmsnorm_mlp.tp4", {"tp": 4}, sp_mlp_tp, (P(None, "tp"), P(), P(None, "tp"), P("tp")),
       P(None, "tp"), sp_mlp, (R(2, 16, 16), 1.0 + R(16, scale=0.2), R(16, 32, scale=0.3), R(32, 16, scale=0.3)),
       bugs=[("psum-then-first-block", ["wrong-offset"]), ("scatter-averaged", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 10. a full training step of a tiny 2-layer decoder under FSDP x TP
#     (check_vma=True): every weight matrix is sharded over tp (heads, MLP
#     hidden) and over dp on its other dim (FSDP: all_gather'd over dp where
#     used, so its gradient is reduce-scattered by the transpose); norm
#     gains and the embedding replicated; causal attention with YaRN
#     partial RoPE; the loss pmean'd over dp; jax.grad, the global gradient
#     norm (each leaf's squared sum psum'd over its sharded axes), clipping
#     and optax.adamw with a weight-decay mask (no decay on gains or the
#     embedding) applied shard-wise. Returns the new parameters and the norm.
D10, F10, H10, E10, V10, T10 = 16, 32, 4, 8, 32, 8
SPEC10 = {"emb": P(), "out": P("dp", None),
          "layers": {l: {"g1": P(), "wq": P("dp", "tp"), "wk": P("dp", "tp"), "wv": P("dp", "tp"),
                      "wo": P("tp", None, "dp"), "g2": P(), "w1": P("dp", "tp"), "w2": P("tp", "dp")}
                     for l in ("l0", "l1")}}


def init10():
    def layer():
        return {"g1": 1.0 + R(D10, scale=0.1), "wq": R(D10, H10, E10, scale=0.25), "wk": R(D10, H10, E10, scale=0.25),
                "wv": R(D10, H10, E10, scale=0.25), "wo": R(H10, E10, D10, scale=0.25), "g2": 1.0 + R(D10, scale=0.1),
                "w1": R(D10, F10, scale=0.25), "w2": R(F10, D10, scale=0.25)}
    return {"emb": R(V10, D10, scale=0.5), "out": R(D10, V10, scale=0.25), "layers": {"l0": layer(), "l1": layer()}}


INV10, MSC10 = yarn_inv_freq(4, orig_len=4)
CLIP10 = 1.0


def decay_mask(p):
    return jax.tree_util.tree_map_with_path(
        lambda path, x: not any(getattr(k, "key", None) in ("g1", "g2", "emb") for k in path), p)


OPT10 = optax.adamw(1e-2, weight_decay=0.1, mask=decay_mask)


def fwd10(p, tok, gather=lambda w, a: w, tp_sum=lambda y: y, cons=lambda x, kind: x):
    x = cons(p["emb"][tok], "seq")
    pos = jnp.broadcast_to(jnp.arange(tok.shape[1]), tok.shape)
    ok = jnp.tril(jnp.ones((tok.shape[1],) * 2, bool))
    for L in p["layers"].values():
        h = rms(x, L["g1"])
        q, k, v = (jnp.einsum("btd,dhe->bthe", h, gather(L[n], 0)) for n in ("wq", "wk", "wv"))
        o = attention(rope(q, pos, INV10, MSC10), rope(k, pos, INV10, MSC10), v, ok)
        x = cons(x + tp_sum(jnp.einsum("bthe,hed->btd", cons(o, "heads"), gather(L["wo"], 2))), "seq")
        h = rms(x, L["g2"])
        x = x + tp_sum(jnp.einsum("btf,fd->btd", jax.nn.gelu(jnp.einsum("btd,df->btf", h, gather(L["w1"], 0))),
                                  gather(L["w2"], 1)))
        x = cons(x, "seq")
    return jnp.einsum("btd,dv->btv", rms(x), gather(p["out"], 0))


def step10(p, s, tok):
    def loss(p):
        lg = fwd10(p, tok[:, :-1])
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    g = jax.grad(loss)(p)
    n = optax.global_norm(g)
    g = jax.tree.map(lambda x: x * jnp.minimum(1.0, CLIP10 / n), g)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, n


def step10_sm(bug):
    def f(p, s, tok):
        def gather(w, a):
            return lax.all_gather(w, "dp", axis=a, tiled=True)

        def loss(p):
            lg = fwd10(p, tok[:, :-1], gather, lambda y: psum(y, "tp"))
            l = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
            return l if bug == "loss-not-averaged-over-dp" else pmean(l, "dp")
        g = jax.grad(loss)(p)

        def sq(x, spec):
            ax = tuple(a for a in spec if a is not None)
            if bug == "replicated-leaves-psummed":
                ax = ax or ("dp", "tp")
            return psum(jnp.sum(jnp.square(x)), ax) if ax else jnp.sum(jnp.square(x))
        n = jnp.sqrt(sum(jax.tree.leaves(jax.tree.map(sq, g, SPEC10, is_leaf=lambda x: isinstance(x, P)))))
        g = jax.tree.map(lambda x: x * jnp.minimum(1.0, CLIP10 / n), g)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, n
    return f


P10 = init10()
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
C.smap("s.train_step_2layer_fsdp_tp_adamw_clip.dp2xtp4", {"dp": 2, "tp": 4}, step10_sm, (SPEC10, SS10, P("dp")),
       (SPEC10, SS10, P()), step10, (P10, S10, I(0, V10, 4, T10 + 1)),
       bugs=[("loss-not-averaged-over-dp", ["missing-all-reduce"]), ("replicated-leaves-psummed", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. sliding-window causal attention on packed rows, sequence over sp
#     (window W <= block): each device receives the last W - 1 keys, values
#     and segment ids of its left neighbour by ppermute (zeros and segment
#     -1 on device 0) and masks by window and document.
W11 = 3


def swa_packed(q, k, v, seg):
    t = jnp.arange(q.shape[1])
    d = t[:, None] - t[None, :]
    ok = (d >= 0) & (d < W11) & (seg[:, :, None] == seg[:, None, :])
    return attention(q, k, v, ok[:, None])


def swa_packed_sp(bug):
    def f(q, k, v, seg):
        n, tl, hw = 4, q.shape[1], W11 - 1
        me = idx("sp")
        perm = [(i, i + 1) for i in range(n - 1)]
        hk, hv = (lax.ppermute(a[:, -hw:], "sp", perm) for a in (k, v))
        hs = seg[:, -hw:] if bug == "halo-segments-own" else lax.ppermute(seg[:, -hw:], "sp", perm)
        hs = jnp.where(me == 0, -1, hs)
        kk, vv, ks = (jnp.concatenate([a, b], 1) for a, b in ((hk, k), (hv, v), (hs, seg)))
        qp = me * tl + jnp.arange(tl)
        kp = me * tl - hw + jnp.arange(tl + hw)
        d = qp[:, None] - kp[None, :]
        hi = W11 + 1 if bug == "window-off-by-one" else W11
        ok = (d >= 0) & (d < hi) & (seg[:, :, None] == ks[:, None, :])
        return attention(q, kk, vv, ok[:, None])
    return f


C.smap("s.swa_packed_docmask_halo.sp4", {"sp": 4}, swa_packed_sp, (P(None, "sp"),) * 4, P(None, "sp"), swa_packed,
       (R(B, T, H, E), R(B, T, H, E), R(B, T, H, E), SEG),
       bugs=[("halo-segments-own", ["missing-collective"]), ("window-off-by-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 12. decoding one token against a KV cache whose sequence is over sp,
#     keys stored unrotated and rotated on the fly with NTK-aware scaled
#     rotary frequencies (base * factor^(rot / (rot - 2)), 6 of 8 dims) at
#     their global cache positions; the query at position len - 1 of its
#     row; the cache masked beyond each row's length; the softmax merged
#     across devices by pmax and psum.
ROT12 = 6
INV12 = (1.0 / ((10000.0 * 4.0 ** (ROT12 / (ROT12 - 2))) ** (np.arange(0, ROT12, 2) / ROT12))).astype(np.float32)
TC = 32


def ntk_decode(q, k, v, lens):
    qr = rope(q, (lens - 1)[:, None], INV12)
    kr = rope(k, jnp.broadcast_to(jnp.arange(k.shape[1]), k.shape[:2]), INV12)
    ok = (jnp.arange(k.shape[1])[None, :] < lens[:, None])[:, None, None]
    return attention(qr, kr, v, ok)


def ntk_decode_sp(bug):
    def f(q, k, v, lens):
        tl = k.shape[1]
        gpos = jnp.arange(tl) if bug == "cache-positions-local" else idx("sp") * tl + jnp.arange(tl)
        qr = rope(q, (lens - 1)[:, None], INV12)
        kr = rope(k, jnp.broadcast_to(gpos, k.shape[:2]), INV12)
        s = jnp.einsum("bqhe,bkhe->bhqk", qr, kr) / np.sqrt(q.shape[-1])
        s = jnp.where((gpos[None, :] < lens[:, None])[:, None, None], s, NEG)
        m = pmax(s.max(-1, keepdims=True), "sp")
        e = jnp.exp(s - m)
        den = e.sum(-1, keepdims=True)
        if bug != "denominator-not-psummed":
            den = psum(den, "sp")
        o = psum(jnp.einsum("bhqk,bkhe->bhqe", e, v), "sp") / den
        return jnp.swapaxes(o, 1, 2)
    return f


C.smap("s.ntk_rope_decode_kvcache_sp.sp4", {"sp": 4}, ntk_decode_sp, (P(), P(None, "sp"), P(None, "sp"), P()), P(),
       ntk_decode, (R(3, 1, H, E), R(3, TC, H, E), R(3, TC, H, E), np.array([32, 19, 5], np.int32)),
       bugs=[("cache-positions-local", ["wrong-offset"]), ("denominator-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (jax.jit with in/out shardings).
# 13. packed rows with the sequence over sp: position ids restarting per
#     document (cummax of document starts), YaRN partial RoPE at them, and
#     causal attention under the document mask.


def packed_block(q, k, v, seg):
    pos = doc_positions(seg)
    q, k = rope(q, pos, INV, MSC), rope(k, pos, INV, MSC)
    ok = (seg[:, :, None] == seg[:, None, :]) & jnp.tril(jnp.ones((q.shape[1],) * 2, bool))
    return attention(q, k, v, ok[:, None])


C.gspmd("g.packed_yarn_rope_docmask_attn.sp4", {"sp": 4}, (P(None, "sp"),) * 4, P(None, "sp"), packed_block,
        (R(B, T, H, E), R(B, T, H, E), R(B, T, H, E), SEG))

# 14. the vocab-parallel loss of 7. (z-loss, label smoothing) and its
#     gradient under jax.value_and_grad, the head's vocab over tp, batch
#     over dp.
C.gspmd("g.vocab_ce_zloss_smoothing_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(None, "tp"), P("dp")),
        (P(), P(None, "tp")), ce_zloss, (R(4, 6, D7), R(D7, V7, scale=0.5), I(0, V7, 4, 6)))

# 15. the next-token loss of 3. on packed rows (targets masked at document
#     boundaries) and its gradient in the head, sequence over sp.
C.gspmd("g.packed_nexttoken_loss_grad.sp4", {"sp": 4}, (P(None, "sp"), P(), P(None, "sp"), P(None, "sp")),
        (P(), P()), lambda h, w, tok, seg: jax.value_and_grad(packed_loss, 1)(h, w, tok, seg),
        (R(B, T, 16), R(16, V, scale=0.5), I(0, V, B, T), SEG3))

# 16. the training step of 10. (AdamW with a decay mask, clipping by the
#     global norm) with the parameters under FSDP x TP shardings and the
#     activations constrained the Megatron way: the residual stream with
#     its sequence over tp (sequence parallel), attention outputs with
#     heads over tp.
M14 = make_mesh({"dp": 2, "tp": 4})


def cons14(x, kind):
    spec = P("dp", "tp", None) if kind == "seq" else P("dp", None, "tp", None)
    return lax.with_sharding_constraint(x, NamedSharding(M14, spec))


def step14(p, s, tok):
    def loss(p):
        lg = fwd10(p, tok[:, :-1], cons=cons14)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    g = jax.grad(loss)(p)
    n = optax.global_norm(g)
    g = jax.tree.map(lambda x: x * jnp.minimum(1.0, CLIP10 / n), g)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, n


C.gspmd("g.train_step_2layer_fsdp_tp_sp_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS10, P("dp")),
        (SPEC10, SS10, P()), step14, (P10, S10, I(0, V10, 4, T10 + 1)))

# 17. GQA with 8 query heads over tp8 and 2 kv heads (replicated
#     projections) jnp.repeat'ed and constrained to the query heads'
#     sharding, per-head QK-norm with per-head gains.
M15 = make_mesh({"tp": 8})


def gqa_qknorm(x, wq, wk, wv, wo, gq, gk):
    q = rms(jnp.einsum("btd,dhe->bthe", x, wq), gq)
    k = rms(jnp.einsum("btd,dhe->bthe", x, wk), gk)
    v = jnp.einsum("btd,dhe->bthe", x, wv)
    k, v = (lax.with_sharding_constraint(jnp.repeat(a, HQ // HKV, 2), NamedSharding(M15, P(None, None, "tp")))
            for a in (k, v))
    o = attention(q, k, v, jnp.tril(jnp.ones((x.shape[1],) * 2, bool)))
    return jnp.einsum("bthe,hed->btd", o, wo)


C.gspmd("g.gqa_tp8_two_kv_heads_qknorm.tp8", {"tp": 8}, (P(), P(None, "tp"), P(), P(), P("tp"), P("tp"), P()), P(),
        gqa_qknorm, (R(2, 8, D5), R(D5, HQ, E, scale=0.3), R(D5, HKV, E, scale=0.3), R(D5, HKV, E, scale=0.3),
                     R(HQ, E, D5, scale=0.3), 1.0 + R(HQ, E, scale=0.3), 1.0 + R(HKV, E, scale=0.3)))

C.finish()
