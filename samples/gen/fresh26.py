"""DOCSTRING"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh26.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

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

C.finish()
