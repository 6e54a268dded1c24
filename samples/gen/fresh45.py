"""samples/fresh45: a 45th batch of programs as a user writes them, on the
theme of position encodings and attention-bias variants under sequence and
head parallelism in current JAX (ALiBi slopes per head over tp, T5
relative-position buckets with the sequence over sp, RoPE variants, sliding-
window and chunked-local attention with the sequence sharded, sigmoid
attention, differential attention, attention logit soft-capping, training
steps with jax.grad and optax), none of them an idiom of samples/fresh ..
fresh26, probe, train or wild.
shard_map families:
 1. ALiBi causal self-attention, 8 heads over tp4 (2 per rank), batch over
    dp2: slopes 2^(-8 (h+1)/H) of the rank's heads axis_index * 2 + j,
    output projection psum'd (dp2 x tp4). Bugs: slopes of the local head
    index (not offset by the head shard), slopes from the local head count.
 2. BLOOM-style ALiBi (bias slope * key_position only; the baseline has
    slope * (key - query), equal after the softmax since the difference is
    constant per query row), queries' sequence over sp4, heads over tp2,
    keys / values all_gather'd, causal mask at global positions
    (sp4 x tp2). Bugs: slopes not offset by the tp head shard, key
    positions local (tiled arange).
 3. T5 causal relative-position buckets in ring attention (sp4): key /
    value blocks ppermute'd right, the block held at step s is device
    (me - s) mod n's, bias from a replicated (buckets, heads) table,
    online-softmax accumulation over an unrolled loop. Bugs: source block
    computed in the wrong direction (me + s), relative positions from
    local indices (the causal mask kept global).
 4. NTK-aware scaled RoPE (base * alpha^(rot/(rot-2))), GPT-NeoX partial
    rotary (first half of the head dims, rotate-half), heads over tp4 with
    column-parallel q/k/v, sequence over sp2 with rotated keys gathered,
    output projection psum'd (sp2 x tp4). Bugs: local positions, the
    rotary applied to the wrong half (the last dims).
 5. left-padded batch: position ids cumsum(mask) - 1 (padding set to 1),
    sequence over sp4 with an exclusive prefix of the all_gather'd per-block
    mask sums; GPT-J interleaved rotary; key padding and causal masks
    (sp4). Bugs: cumsum not carried across blocks, rotate-half applied
    where the layout is interleaved.
 6. 2-D RoPE for a ViT on an 8 x 4 patch grid flattened row-major, tokens
    over sp4: half of the head dims rotated by the patch row, half by the
    column, both from the global token index; bidirectional attention
    (sp4). Bugs: grid coordinates from the local index, row / column
    halves swapped.
 7. sliding-window causal attention (window 4) with the sequence over sp4:
    a halo of the left neighbour's last 3 keys / values by ppermute, the
    halo of device 0 masked by negative position (sp4). Bugs: a halo one
    short (window off by one at block edges), halo from the right
    neighbour.
 8. chunked-local causal attention (Llama-4 style, chunk 6 not aligned
    with the 8-token shards), keys gathered, chunk ids from global indices
    (sp4). Bugs: query chunk id from the local index, a sliding window of
    6 instead of chunks.
 9. sigmoid attention (sigmoid(qk/sqrt(d) - log n)), keys / values over
    sp4 and queries replicated over sp, batch over dp2, partial outputs
    psum'd (dp2 x sp4). Bugs: bias from the local key count, causal mask
    at local key positions.
10. differential attention (A1 - lambda A2, lambda from four replicated
    vectors plus lambda_init, per-head RMS norm times (1 - lambda_init)),
    heads over tp4, sequence over sp2 with keys gathered, output projection
    psum'd (sp2 x tp4). Bugs: causal mask at local query positions, lambda
    psum'd over tp.
11. Gemma-2 attention logit soft-capping (cap 5, then the causal + sliding
    window mask, then softmax), query_pre_attn_scalar scaling, heads over
    tp4, batch over dp2 (dp2 x tp4). Bugs: soft-cap applied after the mask
    (masked logits become -cap and leak), pmean instead of psum of the
    output projection.
12. training step (jax.value_and_grad + optax.adamw, check_vma=True) of a
    1-layer ALiBi decoder with soft-capped attention and final logits,
    heads and MLP over tp4 (slopes per rank), embedding / head / gain
    replicated, batch over dp2, loss pmean'd over dp; returns parameters,
    optimizer state and loss (dp2 x tp4). Bugs: slopes of the local head
    index, loss not pmean'd over dp (the logged loss pmean'd after, so
    check_vma accepts the P() output; gradients twice as large).
13. training step (jax.value_and_grad + optax.sgd with Nesterov momentum,
    check_vma=True) of a 1-layer sliding-window decoder with NTK partial
    RoPE, sequence over sp4: halo by ppermute, next-token targets across
    the block edge from the right neighbour, loss psum'd over sp / token
    count, parameters replicated (sp4). Bugs: halo one short, RoPE at local
    positions (mask kept global).
14. T5 bidirectional buckets computed as the single-device code does: the
    full (T, T) bias on every device, the query block's rows taken by
    lax.dynamic_slice at axis_index * block; bias table heads over tp4,
    sequence over sp2 (sp2 x tp4). Bugs: rows at offset 0, the bias matrix
    transposed (key - query swapped).
15. Ulysses sequence parallelism with ALiBi: all_to_all from sequence- to
    head-sharded (2 of 8 heads per device), causal ALiBi with the slopes of
    heads axis_index * 2 + j, all_to_all back (sp4). Bugs: slopes not
    offset by the head shard, heads re-interleaved after the all_to_all
    back.
16. Hugging Face-style rotary: cos / sin caches gathered at the data
    loader's position ids (packed documents restart them), sequence and
    position ids over sp4, keys rotated before the gather (sp4). Bugs: the
    cache rows of the block (dynamic_slice at axis_index * block, ignoring
    the position ids), rotate_half's sign flipped.
17. sigmoid attention with queries and keys both over sp4, bf16 inputs:
    queries all_gather'd, partial outputs of all queries against the local
    keys, psum_scatter along the query axis (sp4). Bug: the
    reduce-scatter divided by sp.
18. Gemma final-logit soft-capping (cap 30) with a vocab-parallel
    cross-entropy and its gradient (jax.value_and_grad inside the body,
    check_vma=True), vocab over tp4, batch over dp2 (dp2 x tp4). Bug: the
    cap applied after subtracting the global maximum.
GSPMD pairs (jax.jit with in / out shardings; correct only): 19. ALiBi
attention of 1. with heads over tp4 (dp2 x tp4); 20. 2-D RoPE ViT
attention of 6. with patches over sp4; 21. T5 causal bucket attention with
the sequence over sp4 and the gradient of a squared-output loss with
respect to the bias table; 22. the training step of 12. (dp2 x tp4);
23. sigmoid attention of 9. (dp2 x sp4); 24. differential attention of
10. (sp2 x tp4); 25. sliding-window attention of 7. (sp4); 26. chunked
local attention of 8. (sp4); 27. the NTK partial RoPE block of 4.
(sp2 x tp4).
Numerics: every correct pair agrees with its baseline at rounding level
(f32, at most a few 1e-6); every bug variant differs clearly (see
"numerics"; the training-step bugs by 1e-2 .. 1e-1, the others by 0.1 ..
15). Masks fill with -1e30, not -inf; every query row keeps at least its
own key. Inputs that the witness would draw at random (segment flags) are
avoided: masks and positions come from iota inside the programs, except
5.'s float padding mask and 16.'s position ids, which stay functions of
their inputs whatever values the witness draws.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh45.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh45.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh45.py"
C = Corpus("samples/fresh45", SCRIPT, "samples/gen/run_fresh45.sh", sys.argv[1:])
rng, R, I = seeded(4545)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30
f32 = jnp.float32


def softmax_attend(s, v):
    """s (b, h, q, k) logits, v (b, k, h, e)."""
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def qk(q, k):
    return jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])


def alibi_slopes(n_heads, heads=None):
    """ALiBi slopes 2^(-8 (h+1) / n_heads) of head indices heads (all if None);
    n_heads a power of two."""
    h = jnp.arange(n_heads) if heads is None else heads
    return jnp.exp2(-8.0 * (h + 1).astype(f32) / n_heads)


# ---------------------------------------------------------------------------
# 1. ALiBi causal self-attention with the heads over tp (2 of 8 per rank)
#    and the batch over dp: every rank computes the slopes of its own heads
#    from axis_index * heads_per_rank + j; output projection rows of its
#    heads, psum over tp.
B, T, D, H, E = 4, 8, 16, 8, 4


def alibi_layer(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = jnp.arange(x.shape[1])
    rel = (t[None, :] - t[:, None]).astype(f32)  # key - query (<= 0 where allowed)
    s = qk(q, k) + alibi_slopes(H)[:, None, None] * rel
    s = jnp.where(rel <= 0, s, NEG)
    return jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo)


def alibi_tp(bug):
    def f(x, wq, wk, wv, wo):
        hl = wq.shape[1]
        if bug == "slopes-local-head-index":
            heads = jnp.arange(hl)
        else:
            heads = idx("tp") * hl + jnp.arange(hl)
        n = hl if bug == "slopes-from-local-head-count" else H
        slopes = alibi_slopes(n, heads)
        q = jnp.einsum("btd,dhe->bthe", x, wq)
        k = jnp.einsum("btd,dhe->bthe", x, wk)
        v = jnp.einsum("btd,dhe->bthe", x, wv)
        t = jnp.arange(x.shape[1])
        rel = (t[None, :] - t[:, None]).astype(f32)
        s = jnp.where(rel <= 0, qk(q, k) + slopes[:, None, None] * rel, NEG)
        return psum(jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo), "tp")
    return f


C.smap("s.alibi_slopes_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, alibi_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), alibi_layer,
       (R(B, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.4)),
       bugs=[("slopes-local-head-index", ["wrong-offset"]), ("slopes-from-local-head-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. BLOOM-style ALiBi with the query sequence over sp and the heads over tp
#    (sp4 x tp2): the bias is slope * key_position only (BLOOM's
#    build_alibi_tensor), which differs from slope * (key - query) by a
#    constant per query row that the softmax removes; keys and values
#    all_gather'd over sp; causal mask at global query positions.
T2 = 16


def alibi_rel_attn(q, k, v):
    t = jnp.arange(q.shape[1])
    rel = (t[None, :] - t[:, None]).astype(f32)
    s = qk(q, k) + alibi_slopes(H)[:, None, None] * rel
    return softmax_attend(jnp.where(rel <= 0, s, NEG), v)


def alibi_bloom_sp(bug):
    def f(q, k, v):
        tl, hl = q.shape[1], q.shape[2]
        sp = 4
        me = idx("sp")
        heads = (jnp.arange(hl) if bug == "slopes-not-offset-by-tp" else idx("tp") * hl + jnp.arange(hl))
        kk = lax.all_gather(k, "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        if bug == "key-pos-local":
            kpos = jnp.tile(jnp.arange(tl), sp)
        else:
            kpos = jnp.arange(sp * tl)
        qpos = me * tl + jnp.arange(tl)
        s = qk(q, kk) + alibi_slopes(H, heads)[:, None, None] * kpos.astype(f32)
        s = jnp.where(kpos[None, :] <= qpos[:, None], s, NEG)
        return softmax_attend(s, vv)
    return f


C.smap("s.alibi_bloom_keypos_seq_sp_heads_tp.sp4xtp2", {"sp": 4, "tp": 2}, alibi_bloom_sp,
       (P(None, "sp", "tp"),) * 3, P(None, "sp", "tp"), alibi_rel_attn,
       (R(2, T2, H, E), R(2, T2, H, E), R(2, T2, H, E)),
       bugs=[("slopes-not-offset-by-tp", ["wrong-offset"]), ("key-pos-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. T5 causal relative-position buckets in ring attention, sequence over
#    sp4: key/value blocks travel right by ppermute; at step s a device
#    holds the block of device (me - s) mod n, so the key offset is that
#    block's start; bias from a replicated (buckets, heads) table;
#    online-softmax accumulation (running max, denominator, numerator).
NB, MAXD, H3 = 8, 16, 4


def t5_causal_bucket(rel):
    """rel = key - query; T5's unidirectional bucket of max(query - key, 0)."""
    n = jnp.maximum(-rel, 0)
    exact = NB // 2
    large = exact + (jnp.log(n.astype(f32) / exact + 1e-6) / np.log(MAXD / exact) * (NB - exact)).astype(jnp.int32)
    return jnp.where(n < exact, n, jnp.minimum(large, NB - 1))


def t5_causal_attn(q, k, v, table):
    t = jnp.arange(q.shape[1])
    rel = t[None, :] - t[:, None]
    bias = jnp.transpose(table[t5_causal_bucket(rel)], (2, 0, 1))  # (h, q, k)
    s = qk(q, k) + bias
    return softmax_attend(jnp.where(rel <= 0, s, NEG), v)


def t5_ring(bug):
    def f(q, k, v, table):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        qpos = me * tl + jnp.arange(tl)
        m = jnp.full(q.shape[:1] + (q.shape[2], tl), -jnp.inf, f32)
        l = jnp.zeros_like(m)
        acc = jnp.zeros(q.shape, f32)
        kb, vb = k, v
        for step in range(n):
            src = (me + step) % n if bug == "src-block-wrong-direction" else (me - step) % n
            kpos = src * tl + jnp.arange(tl)
            if bug == "relpos-local-indices":
                rel = jnp.arange(tl)[None, :] - jnp.arange(tl)[:, None]
            else:
                rel = kpos[None, :] - qpos[:, None]
            bias = jnp.transpose(table[t5_causal_bucket(rel)], (2, 0, 1))
            s = qk(q, kb) + bias
            s = jnp.where(kpos[None, :] <= qpos[:, None], s, NEG)
            mn = jnp.maximum(m, s.max(-1))
            a = jnp.exp(m - mn)
            p = jnp.exp(s - mn[..., None])
            l = l * a + p.sum(-1)
            acc = acc * jnp.transpose(a, (0, 2, 1))[..., None] + jnp.einsum("bhqk,bkhe->bqhe", p, vb)
            m = mn
            if step < n - 1:
                perm = [(i, (i + 1) % n) for i in range(n)]
                kb, vb = lax.ppermute(kb, "sp", perm), lax.ppermute(vb, "sp", perm)
        return acc / jnp.transpose(l, (0, 2, 1))[..., None]
    return f


C.smap("s.t5_bucket_bias_ring_causal.sp4", {"sp": 4}, t5_ring,
       (P(None, "sp"), P(None, "sp"), P(None, "sp"), P()), P(None, "sp"), t5_causal_attn,
       (R(2, 16, H3, E), R(2, 16, H3, E), R(2, 16, H3, E), R(NB, H3)),
       bugs=[("src-block-wrong-direction", ["wrong-offset"]), ("relpos-local-indices", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. NTK-aware scaled RoPE (base * alpha^(rot / (rot - 2))), GPT-NeoX-style
#    partial rotary (the first half of each head's dims, rotate-half), heads
#    over tp4 and sequence over sp2: q/k/v projections column-parallel,
#    rotated keys all_gather'd over sp, causal mask, output projection psum
#    over tp.
E4, D4, H4 = 8, 16, 8
ROT4 = 4


def ntk_inv_freq(rot, base=10000.0, alpha=4.0):
    b = base * alpha ** (rot / (rot - 2))
    return (1.0 / b ** (np.arange(0, rot, 2) / rot)).astype(np.float32)


INV4 = ntk_inv_freq(ROT4)


def rope_neox(x, pos, inv, first=True):
    """rotate-half on the first (or, first=False, the last) 2*len(inv) dims."""
    rot = 2 * inv.shape[0]
    ang = pos[:, None].astype(f32) * inv
    cos, sin = jnp.cos(ang)[None, :, None], jnp.sin(ang)[None, :, None]
    if first:
        xr, xp = x[..., :rot], x[..., rot:]
    else:
        xp, xr = x[..., :-rot], x[..., -rot:]
    x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    r = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    return jnp.concatenate([r, xp] if first else [xp, r], -1)


def ntk_block(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = jnp.arange(x.shape[1])
    q, k = rope_neox(q, t, INV4), rope_neox(k, t, INV4)
    s = jnp.where(t[None, :] <= t[:, None], qk(q, k), NEG)
    return jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo)


def ntk_sp_tp(bug):
    def f(x, wq, wk, wv, wo):
        tl = x.shape[1]
        pos = (jnp.arange(tl) if bug == "rope-local-positions" else idx("sp") * tl + jnp.arange(tl))
        first = bug != "rotary-on-last-dims"
        q = rope_neox(jnp.einsum("btd,dhe->bthe", x, wq), pos, INV4, first)
        k = rope_neox(jnp.einsum("btd,dhe->bthe", x, wk), pos, INV4, first)
        v = jnp.einsum("btd,dhe->bthe", x, wv)
        kk = lax.all_gather(k, "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        qpos = idx("sp") * tl + jnp.arange(tl)
        s = jnp.where(jnp.arange(2 * tl)[None, :] <= qpos[:, None], qk(q, kk), NEG)
        return psum(jnp.einsum("bthe,hed->btd", softmax_attend(s, vv), wo), "tp")
    return f


C.smap("s.ntk_partial_rope_neox.sp2xtp4", {"sp": 2, "tp": 4}, ntk_sp_tp,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(None, "sp"), ntk_block,
       (R(2, 16, D4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4),
        R(H4, E4, D4, scale=0.4)),
       bugs=[("rope-local-positions", ["wrong-offset"]), ("rotary-on-last-dims", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. left-padded batch (HF generate style): position ids = cumsum(mask) - 1
#    with padding set to 1, the sequence over sp4, so a block's cumsum is
#    offset by an exclusive prefix of the per-device mask sums
#    (all_gather); GPT-J interleaved rotary (rotate every two) at those
#    positions; keys gathered; key padding and causal masks. The mask
#    comes in as float 0/1 (attention_mask.astype(float)).
E5, H5 = 8, 2
INV5 = (1.0 / 10000.0 ** (np.arange(0, E5, 2) / E5)).astype(np.float32)


def rope_gptj(x, pos, inv):
    ang = pos[..., None].astype(f32) * inv  # (b, t, e/2)
    cos, sin = jnp.cos(ang)[:, :, None], jnp.sin(ang)[:, :, None]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return jnp.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).reshape(x.shape)


def rope_half_on(x, pos, inv):
    ang = pos[..., None].astype(f32) * inv
    cos, sin = jnp.cos(ang)[:, :, None], jnp.sin(ang)[:, :, None]
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)


def leftpad_attn(q, k, v, mask):
    pos = jnp.cumsum(mask, 1) - 1.0
    pos = jnp.where(mask > 0, pos, 1.0)
    q, k = rope_gptj(q, pos, INV5), rope_gptj(k, pos, INV5)
    t = jnp.arange(q.shape[1])
    ok = (t[None, :] <= t[:, None])[None] & (mask[:, None, :] > 0)
    s = jnp.where(ok[:, None], qk(q, k), NEG)
    return softmax_attend(s, v)


def leftpad_sp(bug):
    def f(q, k, v, mask):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        sums = lax.all_gather(mask.sum(1), "sp")  # (n, b)
        pos = jnp.cumsum(mask, 1) - 1.0
        if bug != "cumsum-not-carried":
            pos = pos + jnp.sum(jnp.where((jnp.arange(n) < me)[:, None], sums, 0.0), 0)[:, None]
        pos = jnp.where(mask > 0, pos, 1.0)
        rot = rope_half_on if bug == "rotate-half-on-interleaved" else rope_gptj
        q, k = rot(q, pos, INV5), rot(k, pos, INV5)
        kk, vv, mm = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v, mask))
        qpos = me * tl + jnp.arange(tl)
        ok = (jnp.arange(n * tl)[None, :] <= qpos[:, None])[None] & (mm[:, None, :] > 0)
        return softmax_attend(jnp.where(ok[:, None], qk(q, kk), NEG), vv)
    return f


MASK5 = np.ones((2, 16), np.float32)
MASK5[0, :5] = 0.0
MASK5[1, :9] = 0.0
C.smap("s.leftpad_posids_gptj_rope.sp4", {"sp": 4}, leftpad_sp, (P(None, "sp"),) * 4, P(None, "sp"), leftpad_attn,
       (R(2, 16, H5, E5), R(2, 16, H5, E5), R(2, 16, H5, E5), MASK5),
       bugs=[("cumsum-not-carried", ["missing-collective"]), ("rotate-half-on-interleaved", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. 2-D RoPE for a ViT on an 8 x 4 patch grid flattened row-major, tokens
#    over sp4 (two grid rows per device): the first half of each head's
#    dims rotated by the patch row, the second half by the patch column,
#    both from the global token index; bidirectional attention with keys
#    all_gather'd.
GH, GW, E6, H6 = 8, 4, 8, 2
INV6 = (1.0 / 100.0 ** (np.arange(0, E6 // 2, 2) / (E6 // 2))).astype(np.float32)


def rope2d(x, t, swap=False):
    r, c = t // GW, t % GW
    h = x.shape[-1] // 2
    a, b = (c, r) if swap else (r, c)
    pa = jnp.broadcast_to(a, x.shape[:2])
    pb = jnp.broadcast_to(b, x.shape[:2])
    return jnp.concatenate([rope_half_on(x[..., :h], pa, INV6), rope_half_on(x[..., h:], pb, INV6)], -1)


def vit2d_attn(q, k, v):
    t = jnp.arange(q.shape[1])
    return softmax_attend(qk(rope2d(q, t), rope2d(k, t)), v)


def vit2d_sp(bug):
    def f(q, k, v):
        tl = q.shape[1]
        t = jnp.arange(tl) if bug == "grid-from-local-index" else idx("sp") * tl + jnp.arange(tl)
        sw = bug == "row-col-halves-swapped"
        q, k = rope2d(q, t, sw), rope2d(k, t, sw)
        kk = lax.all_gather(k, "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        return softmax_attend(qk(q, kk), vv)
    return f


C.smap("s.vit_rope2d_patches_sp.sp4", {"sp": 4}, vit2d_sp, (P(None, "sp"),) * 3, P(None, "sp"), vit2d_attn,
       (R(2, GH * GW, H6, E6), R(2, GH * GW, H6, E6), R(2, GH * GW, H6, E6)),
       bugs=[("grid-from-local-index", ["wrong-offset"]), ("row-col-halves-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 7. sliding-window causal attention (window 4: keys q-3 .. q) with the
#    sequence over sp4: the left neighbour's last 3 keys and values arrive
#    by ppermute (device 0's halo masked by position < 0).
W7, H7 = 4, 2


def swa_attn(q, k, v):
    t = jnp.arange(q.shape[1])
    d = t[:, None] - t[None, :]
    return softmax_attend(jnp.where((d >= 0) & (d < W7), qk(q, k), NEG), v)


def swa_sp(bug):
    def f(q, k, v):
        n, tl = 4, q.shape[1]
        me = idx("sp")
        hs = W7 - 2 if bug == "halo-one-short" else W7 - 1
        perm = [(i, i - 1) for i in range(1, n)] if bug == "halo-from-right" else [(i, i + 1) for i in range(n - 1)]
        kh = lax.ppermute(k[:, -hs:], "sp", perm)
        vh = lax.ppermute(v[:, -hs:], "sp", perm)
        kk = jnp.concatenate([kh, k], 1)
        vv = jnp.concatenate([vh, v], 1)
        qpos = me * tl + jnp.arange(tl)
        kpos = me * tl - hs + jnp.arange(hs + tl)
        d = qpos[:, None] - kpos[None, :]
        ok = (d >= 0) & (d < W7) & (kpos[None, :] >= 0)
        return softmax_attend(jnp.where(ok, qk(q, kk), NEG), vv)
    return f


C.smap("s.sliding_window_halo_ppermute.sp4", {"sp": 4}, swa_sp, (P(None, "sp"),) * 3, P(None, "sp"), swa_attn,
       (R(2, 32, H7, E), R(2, 32, H7, E), R(2, 32, H7, E)),
       bugs=[("halo-one-short", ["wrong-offset"]), ("halo-from-right", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. chunked-local causal attention (Llama-4 style, chunk 6 not aligned
#    with the 8-token shards), sequence over sp4: keys and values
#    all_gather'd, a query attends to keys of its own chunk (global index //
#    6) at or before it.
CH = 6


def chunked_attn(q, k, v):
    t = jnp.arange(q.shape[1])
    ok = (t[:, None] // CH == t[None, :] // CH) & (t[None, :] <= t[:, None])
    return softmax_attend(jnp.where(ok, qk(q, k), NEG), v)


def chunked_sp(bug):
    def f(q, k, v):
        n, tl = 4, q.shape[1]
        kk = lax.all_gather(k, "sp", axis=1, tiled=True)
        vv = lax.all_gather(v, "sp", axis=1, tiled=True)
        qpos = idx("sp") * tl + jnp.arange(tl)
        kpos = jnp.arange(n * tl)
        qch = (jnp.arange(tl) // CH) if bug == "chunk-id-local" else qpos // CH
        if bug == "window-instead-of-chunk":
            ok = (qpos[:, None] - kpos[None, :] < CH) & (kpos[None, :] <= qpos[:, None])
        else:
            ok = (qch[:, None] == kpos[None, :] // CH) & (kpos[None, :] <= qpos[:, None])
        return softmax_attend(jnp.where(ok, qk(q, kk), NEG), vv)
    return f


C.smap("s.chunked_local_attn_unaligned.sp4", {"sp": 4}, chunked_sp, (P(None, "sp"),) * 3, P(None, "sp"),
       chunked_attn, (R(2, 32, H7, E), R(2, 32, H7, E), R(2, 32, H7, E)),
       bugs=[("chunk-id-local", ["wrong-offset"]), ("window-instead-of-chunk", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. sigmoid attention (sigmoid(qk / sqrt(d) + b), b = -log(n_keys)) with
#    the keys and values sharded over sp4 and the queries replicated over
#    sp, batch over dp2: each device's partial output over its keys is
#    psum'd (no normaliser to merge); causal mask at global key positions.


def sigmoid_attn(q, k, v):
    t = jnp.arange(k.shape[1])
    s = qk(q, k) - np.log(k.shape[1])
    p = jnp.where(t[None, :] <= t[:, None], jax.nn.sigmoid(s), 0.0)
    return jnp.einsum("bhqk,bkhe->bqhe", p, v)


def sigmoid_sp(bug):
    def f(q, k, v):
        sp, tl = 4, k.shape[1]
        nk = tl if bug == "bias-local-key-count" else sp * tl
        kpos = jnp.arange(tl) if bug == "key-pos-local" else idx("sp") * tl + jnp.arange(tl)
        qpos = jnp.arange(q.shape[1])
        s = qk(q, k) - jnp.log(float(nk))
        p = jnp.where(kpos[None, :] <= qpos[:, None], jax.nn.sigmoid(s), 0.0)
        return psum(jnp.einsum("bhqk,bkhe->bqhe", p, v), "sp")
    return f


C.smap("s.sigmoid_attn_keys_sharded_psum.dp2xsp4", {"dp": 2, "sp": 4}, sigmoid_sp,
       (P("dp"), P("dp", "sp"), P("dp", "sp")), P("dp"), sigmoid_attn,
       (R(4, 16, 2, E), R(4, 16, 2, E), R(4, 16, 2, E)),
       bugs=[("bias-local-key-count", ["wrong-scale"]), ("key-pos-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. differential attention (DIFF Transformer): each head has two query /
#     key halves, A1 - lambda A2, lambda = exp(lq1 . lk1) - exp(lq2 . lk2) +
#     lambda_init shared by all heads (replicated vectors), a per-head RMS
#     norm times (1 - lambda_init); heads over tp4, sequence over sp2 (keys
#     gathered), output projection psum over tp.
H10, E10, D10 = 4, 4, 16
LINIT = 0.8 - 0.6 * np.exp(-0.3 * 1)


def diff_core(x, wq, wk, wv, wo, lam, g, kgather=lambda a: a, qpos=None, tp_sum=lambda y: y, lam_fix=lambda l: l):
    b, t = x.shape[:2]
    q = jnp.einsum("btd,dhe->bthe", x, wq)  # e = 2 * E10
    k = kgather(jnp.einsum("btd,dhe->bthe", x, wk))
    v = kgather(jnp.einsum("btd,dhe->bthe", x, wv))
    qp = jnp.arange(t) if qpos is None else qpos
    kp = jnp.arange(k.shape[1])
    causal = kp[None, :] <= qp[:, None]
    a1 = jax.nn.softmax(jnp.where(causal, qk(q[..., :E10], k[..., :E10]), NEG), -1)
    a2 = jax.nn.softmax(jnp.where(causal, qk(q[..., E10:], k[..., E10:]), NEG), -1)
    l = lam_fix(jnp.exp(jnp.dot(lam[0], lam[1])) - jnp.exp(jnp.dot(lam[2], lam[3])) + LINIT)
    o = jnp.einsum("bhqk,bkhe->bqhe", a1 - l * a2, v)
    o = o * lax.rsqrt(jnp.mean(jnp.square(o), -1, keepdims=True) + 1e-5) * g * (1 - LINIT)
    return tp_sum(jnp.einsum("bthe,hed->btd", o, wo))


def diff_attn(x, wq, wk, wv, wo, lam, g):
    return diff_core(x, wq, wk, wv, wo, lam, g)


def diff_sp_tp(bug):
    def f(x, wq, wk, wv, wo, lam, g):
        tl = x.shape[1]
        qpos = (jnp.arange(tl) if bug == "mask-local-query-pos" else idx("sp") * tl + jnp.arange(tl))
        lam_fix = (lambda l: psum(l, "tp")) if bug == "lambda-psummed-over-tp" else (lambda l: l)
        return diff_core(x, wq, wk, wv, wo, lam, g, lambda a: lax.all_gather(a, "sp", axis=1, tiled=True), qpos,
                         lambda y: psum(y, "tp"), lam_fix)
    return f


C.smap("s.diff_attn_heads_tp_seq_sp.sp2xtp4", {"sp": 2, "tp": 4}, diff_sp_tp,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(None, "sp"), diff_attn,
       (R(2, 8, D10), R(D10, H10, 2 * E10, scale=0.4), R(D10, H10, 2 * E10, scale=0.4),
        R(D10, H10, 2 * E10, scale=0.4), R(H10, 2 * E10, D10, scale=0.4), R(4, 4, scale=0.3),
        1.0 + R(2 * E10, scale=0.1)),
       bugs=[("mask-local-query-pos", ["wrong-offset"]), ("lambda-psummed-over-tp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 11. Gemma-2 attention logit soft-capping (cap * tanh(s / cap), cap 5, then
#     the causal + sliding-window mask, then softmax) with heads over tp4,
#     batch over dp2; queries scaled by query_pre_attn_scalar^-0.5 before
#     the dot; output projection psum over tp.
CAP, WIN11 = 5.0, 5


def softcap_layer(x, wq, wk, wv, wo):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    s = jnp.einsum("bqhe,bkhe->bhqk", q * 16.0 ** -0.5, k)
    s = CAP * jnp.tanh(s / CAP)
    t = jnp.arange(x.shape[1])
    d = t[:, None] - t[None, :]
    s = jnp.where((d >= 0) & (d < WIN11), s, NEG)
    return jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo)


def softcap_tp(bug):
    def f(x, wq, wk, wv, wo):
        q = jnp.einsum("btd,dhe->bthe", x, wq) * 16.0 ** -0.5
        k = jnp.einsum("btd,dhe->bthe", x, wk)
        v = jnp.einsum("btd,dhe->bthe", x, wv)
        s = jnp.einsum("bqhe,bkhe->bhqk", q, k)
        t = jnp.arange(x.shape[1])
        d = t[:, None] - t[None, :]
        ok = (d >= 0) & (d < WIN11)
        if bug == "softcap-after-mask":
            s = CAP * jnp.tanh(jnp.where(ok, s, NEG) / CAP)
        else:
            s = jnp.where(ok, CAP * jnp.tanh(s / CAP), NEG)
        y = jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo)
        return pmean(y, "tp") if bug == "pmean-not-psum" else psum(y, "tp")
    return f


C.smap("s.gemma2_softcap_window_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, softcap_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), softcap_layer,
       (R(4, 12, D), R(D, H, E, scale=1.5), R(D, H, E, scale=1.5), R(D, H, E, scale=0.4), R(H, E, D, scale=0.4)),
       bugs=[("softcap-after-mask", ["wrong-order"]), ("pmean-not-psum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 12. training step (jax.grad + optax.adamw, check_vma=True) of a 1-layer
#     ALiBi decoder with soft-capped attention logits and soft-capped final
#     logits: heads over tp4 with per-rank slopes, MLP column / row parallel,
#     embedding and head replicated, batch over dp2, loss pmean'd over dp.
V12, D12, F12, H12, E12, T12 = 24, 16, 32, 8, 4, 8
SPEC12 = {"emb": P(), "head": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"),
          "w1": P(None, "tp"), "w2": P("tp"), "g": P()}
OPT12 = optax.adamw(3e-3, weight_decay=0.01)


def init12():
    return {"emb": R(V12, D12, scale=0.5), "head": R(D12, V12, scale=0.3), "wq": R(D12, H12, E12, scale=0.3),
            "wk": R(D12, H12, E12, scale=0.3), "wv": R(D12, H12, E12, scale=0.3), "wo": R(H12, E12, D12, scale=0.3),
            "w1": R(D12, F12, scale=0.3), "w2": R(F12, D12, scale=0.3), "g": 1.0 + R(D12, scale=0.1)}


def fwd12(p, tok, slopes, tp_sum=lambda y: y):
    x = p["emb"][tok]
    h = x * lax.rsqrt(jnp.mean(jnp.square(x), -1, keepdims=True) + 1e-6) * p["g"]
    q, k, v = (jnp.einsum("btd,dhe->bthe", h, p[n]) for n in ("wq", "wk", "wv"))
    t = jnp.arange(tok.shape[1])
    rel = (t[None, :] - t[:, None]).astype(f32)
    s = 20.0 * jnp.tanh(qk(q, k) / 20.0) + slopes[:, None, None] * rel
    x = x + tp_sum(jnp.einsum("bthe,hed->btd", softmax_attend(jnp.where(rel <= 0, s, NEG), v), p["wo"]))
    x = x + tp_sum(jnp.einsum("btf,fd->btd", jax.nn.gelu(jnp.einsum("btd,df->btf", x, p["w1"])), p["w2"]))
    lg = jnp.einsum("btd,dv->btv", x, p["head"])
    return 30.0 * jnp.tanh(lg / 30.0)


def step12(p, s, tok):
    def loss(p):
        lg = fwd12(p, tok[:, :-1], alibi_slopes(H12))
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step12_sm(bug):
    def f(p, s, tok):
        hl = p["wq"].shape[1]
        heads = jnp.arange(hl) if bug == "slopes-local-head-index" else idx("tp") * hl + jnp.arange(hl)

        def loss(p):
            lg = fwd12(p, tok[:, :-1], alibi_slopes(H12, heads), lambda y: psum(y, "tp"))
            l = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
            return l if bug == "loss-not-pmean-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, (pmean(l, "dp") if bug == "loss-not-pmean-dp" else l)
    return f


P12 = init12()
S12 = OPT12.init(P12)
SS12 = state_specs(S12, SPEC12)
TOK12 = I(0, V12, 4, T12 + 1)
C.smap("s.train_alibi_softcap_decoder_adamw.dp2xtp4", {"dp": 2, "tp": 4}, step12_sm, (SPEC12, SS12, P("dp")),
       (SPEC12, SS12, P()), step12, (P12, S12, TOK12),
       bugs=[("slopes-local-head-index", ["wrong-offset"]), ("loss-not-pmean-dp", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 13. training step (jax.grad + optax.sgd with nesterov momentum,
#     check_vma=True) of a 1-layer sliding-window decoder with
#     NTK-scaled partial RoPE, the sequence over sp4: halo of the last
#     W-1 keys / values from the left neighbour, positions axis_index *
#     block + t, targets of the block's last token from the right
#     neighbour's first token; loss = psum of token losses / token count;
#     all parameters replicated (their gradients psum'd over sp by the
#     transpose of the implicit pvary).
V13, D13, H13, E13, T13, W13 = 20, 16, 2, 8, 32, 4
OPT13 = optax.sgd(0.05, momentum=0.9, nesterov=True)
INV13 = ntk_inv_freq(4, alpha=2.0)


def init13():
    return {"emb": R(V13, D13, scale=0.5), "wq": R(D13, H13, E13, scale=0.3), "wk": R(D13, H13, E13, scale=0.3),
            "wv": R(D13, H13, E13, scale=0.3), "wo": R(H13, E13, D13, scale=0.3), "head": R(D13, V13, scale=0.3)}


def fwd13(p, x, rope_pos, q_pos, kv_fn):
    """kv_fn(k, v) -> (keys, values, their positions)."""
    h = p["emb"][x]
    q = rope_neox(jnp.einsum("btd,dhe->bthe", h, p["wq"]), rope_pos, INV13)
    k = rope_neox(jnp.einsum("btd,dhe->bthe", h, p["wk"]), rope_pos, INV13)
    v = jnp.einsum("btd,dhe->bthe", h, p["wv"])
    kk, vv, kpos = kv_fn(k, v)
    d = q_pos[:, None] - kpos[None, :]
    s = jnp.where((d >= 0) & (d < W13) & (kpos[None, :] >= 0), qk(q, kk), NEG)
    h = h + jnp.einsum("bthe,hed->btd", softmax_attend(s, vv), p["wo"])
    return jnp.einsum("btd,dv->btv", h, p["head"])


def step13(p, s, tok):
    def loss(p):
        t = jnp.arange(T13)
        lg = fwd13(p, tok, t, t, lambda k, v: (k, v, t))[:, :-1]
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, tok[:, 1:]))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step13_sm(bug):
    def f(p, s, tok):
        n, tl = 4, tok.shape[1]
        me = idx("sp")
        right = [(i, i + 1) for i in range(n - 1)]
        hs = W13 - 2 if bug == "halo-one-short" else W13 - 1
        pos = jnp.arange(tl) if bug == "rope-local-positions" else me * tl + jnp.arange(tl)
        gpos = me * tl + jnp.arange(tl)

        def kv(k, v):
            kh = lax.ppermute(k[:, -hs:], "sp", right)
            vh = lax.ppermute(v[:, -hs:], "sp", right)
            return jnp.concatenate([kh, k], 1), jnp.concatenate([vh, v], 1), me * tl - hs + jnp.arange(hs + tl)

        nxt = lax.ppermute(tok[:, :1], "sp", [(i, i - 1) for i in range(1, n)])
        tgt = jnp.concatenate([tok[:, 1:], nxt], 1)
        valid = (gpos < n * tl - 1).astype(f32)[None, :]

        def loss(p):
            lg = fwd13(p, tok, pos, gpos, kv)
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, tgt)
            return psum(jnp.sum(ce * valid), "sp") / (tok.shape[0] * (n * tl - 1))
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT13.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P13 = init13()
S13 = OPT13.init(P13)
C.smap("s.train_swa_ntk_rope_seq_sp_sgd.sp4", {"sp": 4}, step13_sm, (P(), P(), P(None, "sp")), (P(), P(), P()),
       step13, (P13, S13, I(0, V13, 2, T13)),
       bugs=[("halo-one-short", ["wrong-offset"]), ("rope-local-positions", ["wrong-offset"])], check_vma=True)

# ---------------------------------------------------------------------------
# 14. T5 bidirectional relative-position bias computed the way a user copies
#     it from the single-device code: every device builds the full (T, T)
#     bucket matrix and takes the rows of its query block with
#     lax.dynamic_slice at axis_index * block; the bias table's heads over
#     tp (sp2 x tp4), keys and values gathered over sp, output projection
#     psum over tp.
NB14, MAXD14, H14, E14, D14, T14 = 16, 32, 8, 4, 16, 16


def t5_bidir_bucket(rel):
    nb = NB14 // 2
    ret = jnp.where(rel > 0, nb, 0)
    n = jnp.abs(rel)
    exact = nb // 2
    large = exact + (jnp.log(n.astype(f32) / exact + 1e-6) / np.log(MAXD14 / exact) * (nb - exact)).astype(jnp.int32)
    return ret + jnp.where(n < exact, n, jnp.minimum(large, nb - 1))


def t5_enc_layer(x, wq, wk, wv, wo, table):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = jnp.arange(x.shape[1])
    bias = jnp.transpose(jnp.take(table, t5_bidir_bucket(t[None, :] - t[:, None]), axis=0), (2, 0, 1))
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) + bias  # T5: no 1/sqrt(d)
    return jnp.einsum("bthe,hed->btd", softmax_attend(s, v), wo)


def t5_enc_sp_tp(bug):
    def f(x, wq, wk, wv, wo, table):
        tl = x.shape[1]
        tg = 2 * tl
        t = jnp.arange(tg)
        full = jnp.take(table, t5_bidir_bucket(t[None, :] - t[:, None]), axis=0)  # (T, T, h_local)
        start = 0 if bug == "bias-rows-at-offset-0" else idx("sp") * tl
        rows = lax.dynamic_slice_in_dim(full, start, tl, 0)
        if bug == "bias-transposed":
            rows = lax.dynamic_slice_in_dim(jnp.swapaxes(full, 0, 1), start, tl, 0)
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        s = jnp.einsum("bqhe,bkhe->bhqk", q, kk) + jnp.transpose(rows, (2, 0, 1))
        return psum(jnp.einsum("bthe,hed->btd", softmax_attend(s, vv), wo), "tp")
    return f


C.smap("s.t5_bidir_bias_dynamic_slice_rows.sp2xtp4", {"sp": 2, "tp": 4}, t5_enc_sp_tp,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp")), P(None, "sp"),
       t5_enc_layer,
       (R(2, T14, D14), R(D14, H14, E14, scale=0.3), R(D14, H14, E14, scale=0.3), R(D14, H14, E14, scale=0.3),
        R(H14, E14, D14, scale=0.3), R(NB14, H14)),
       bugs=[("bias-rows-at-offset-0", ["wrong-offset"]), ("bias-transposed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 15. Ulysses (DeepSpeed-style) sequence parallelism with ALiBi: q/k/v come
#     in with the sequence over sp4 and all heads; an all_to_all trades the
#     sequence shard for a head shard (2 of 8 heads per device, full
#     sequence), ALiBi causal attention with the slopes of heads
#     axis_index * 2 + j, and an all_to_all back.


def ulysses_alibi(bug):
    def f(q, k, v):
        a2a = lambda a: lax.all_to_all(a, "sp", 2, 1, tiled=True)  # (b, T/n, H) -> (b, T, H/n)
        back = lambda a: lax.all_to_all(a, "sp", 1, 2, tiled=True)
        q, k, v = a2a(q), a2a(k), a2a(v)
        hl = q.shape[2]
        heads = jnp.arange(hl) if bug == "slopes-not-offset-by-head-shard" else idx("sp") * hl + jnp.arange(hl)
        t = jnp.arange(q.shape[1])
        rel = (t[None, :] - t[:, None]).astype(f32)
        s = qk(q, k) + alibi_slopes(H, heads)[:, None, None] * rel
        o = softmax_attend(jnp.where(rel <= 0, s, NEG), v)
        o = back(o)
        if bug == "heads-reinterleaved-after-back":  # undoes a (hl, n) head interleave that was never made
            b, tl, _, e = o.shape
            o = o.reshape(b, tl, 4, hl, e).swapaxes(2, 3).reshape(b, tl, H, e)
        return o
    return f


C.smap("s.ulysses_alibi_all_to_all_heads.sp4", {"sp": 4}, ulysses_alibi, (P(None, "sp"),) * 3, P(None, "sp"),
       alibi_rel_attn, (R(2, T2, H, E), R(2, T2, H, E), R(2, T2, H, E)),
       bugs=[("slopes-not-offset-by-head-shard", ["wrong-offset"]), ("heads-reinterleaved-after-back", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 16. Hugging Face-style rotary with cos / sin caches gathered at position
#     ids that the data loader supplies (packed documents restart them), the
#     sequence and the position ids over sp4; keys rotated before the
#     all_gather; bidirectional within the batch row (encoder).
E16, H16, MAXP = 8, 2, 32
_inv16 = 1.0 / 10000.0 ** (np.arange(0, E16, 2) / E16)
_emb16 = np.concatenate([np.outer(np.arange(MAXP), _inv16)] * 2, -1)
COS16, SIN16 = np.cos(_emb16).astype(np.float32), np.sin(_emb16).astype(np.float32)


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate([-x[..., h:], x[..., :h]], -1)


def hf_rope_attn(q, k, v, pos_ids, cos_c, sin_c):
    cos, sin = cos_c[pos_ids][:, :, None], sin_c[pos_ids][:, :, None]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    return softmax_attend(qk(q, k), v)


def hf_rope_sp(bug):
    def f(q, k, v, pos_ids, cos_c, sin_c):
        tl = q.shape[1]
        if bug == "cache-rows-of-block":
            cos = lax.dynamic_slice_in_dim(cos_c, idx("sp") * tl, tl, 0)[None, :, None]
            sin = lax.dynamic_slice_in_dim(sin_c, idx("sp") * tl, tl, 0)[None, :, None]
        else:
            cos, sin = cos_c[pos_ids][:, :, None], sin_c[pos_ids][:, :, None]
        if bug == "rotate-half-sign-flipped":
            rh = lambda x: -rotate_half(x)
        else:
            rh = rotate_half
        q = q * cos + rh(q) * sin
        k = k * cos + rh(k) * sin
        kk, vv = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        return softmax_attend(qk(q, kk), vv)
    return f


POS16 = np.concatenate([np.arange(7), np.arange(12), np.arange(13)])[None].repeat(2, 0).astype(np.int32)
C.smap("s.hf_rope_cache_gather_posids.sp4", {"sp": 4}, hf_rope_sp, (P(None, "sp"),) * 4 + (P(), P()), P(None, "sp"),
       hf_rope_attn, (R(2, 32, H16, E16), R(2, 32, H16, E16), R(2, 32, H16, E16), POS16, COS16, SIN16),
       bugs=[("cache-rows-of-block", ["wrong-offset"]), ("rotate-half-sign-flipped", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 17. sigmoid attention with queries and keys both over sp4 (bf16 inputs,
#     f32 accumulation): each device computes the partial output of ALL
#     queries against its key block (queries all_gather'd), and a
#     psum_scatter along the query axis hands every device the sum for its
#     own query block.


def sigmoid_attn_bf16(q, k, v):
    q, k, v = (a.astype(f32) for a in (q, k, v))
    return sigmoid_attn(q, k, v)


def sigmoid_rs(bug):
    def f(q, k, v):
        q, k, v = (a.astype(f32) for a in (q, k, v))
        n, tl = 4, k.shape[1]
        qa = lax.all_gather(q, "sp", axis=1, tiled=True)
        kpos = idx("sp") * tl + jnp.arange(tl)
        qpos = jnp.arange(n * tl)
        s = qk(qa, k) - np.log(n * tl)
        p = jnp.where(kpos[None, :] <= qpos[:, None], jax.nn.sigmoid(s), 0.0)
        part = jnp.einsum("bhqk,bkhe->bqhe", p, v)
        out = lax.psum_scatter(part, "sp", scatter_dimension=1, tiled=True)
        return out / n if bug == "scatter-divided-by-sp" else out
    return f


C.smap("s.sigmoid_attn_allgather_q_psum_scatter.sp4", {"sp": 4}, sigmoid_rs, (P(None, "sp"),) * 3, P(None, "sp"),
       sigmoid_attn_bf16, tuple(R(2, 16, 2, E, dt=jnp.bfloat16) for _ in range(3)),
       bugs=[("scatter-divided-by-sp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 18. Gemma-style final-logit soft-capping (cap 30) with a vocab-parallel
#     cross-entropy, vocab over tp4 and batch over dp2: logits capped
#     elementwise on each shard, then the global max (pmax), log-sum-exp
#     (psum) and target logit (masked psum at the rank's vocab offset);
#     token mean pmean'd over dp; returns the loss and its gradient with
#     respect to the (vocab-sharded) output matrix (check_vma=True).
V18, D18, CAP18 = 64, 16, 30.0


def capped_ce(h, w, y):
    def loss(w):
        lg = CAP18 * jnp.tanh(jnp.einsum("btd,dv->btv", h, w) / CAP18)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y))
    return jax.value_and_grad(loss)(w)


def capped_ce_tp(bug):
    def f(h, w, y):
        def loss(w):
            vl = w.shape[1]
            raw = jnp.einsum("btd,dv->btv", h, w)
            if bug == "cap-after-max-shift":
                m = pmax(lax.stop_gradient(raw.max(-1)), "tp")
                lg = CAP18 * jnp.tanh((raw - m[..., None]) / CAP18)
                lse = jnp.log(psum(jnp.exp(lg).sum(-1), "tp"))
            else:
                lg = CAP18 * jnp.tanh(raw / CAP18)
                m = pmax(lax.stop_gradient(lg.max(-1)), "tp")
                lse = jnp.log(psum(jnp.exp(lg - m[..., None]).sum(-1), "tp")) + m
            loc = y - idx("tp") * vl
            hit = (loc >= 0) & (loc < vl)
            tgt = psum(jnp.where(hit, jnp.take_along_axis(lg, jnp.clip(loc, 0, vl - 1)[..., None], -1)[..., 0], 0.0),
                       "tp")
            return pmean(jnp.mean(lse - tgt), "dp")
        return jax.value_and_grad(loss)(w)
    return f


C.smap("s.final_logit_softcap_vocab_ce_grad.dp2xtp4", {"dp": 2, "tp": 4}, capped_ce_tp,
       (P("dp"), P(None, "tp"), P("dp")), (P(), P(None, "tp")), capped_ce,
       (R(4, 6, D18), R(D18, V18, scale=3.0), I(0, V18, 4, 6)),
       bugs=[("cap-after-max-shift", ["wrong-order"])], check_vma=True)

# ---------------------------------------------------------------------------
# GSPMD pairs (jax.jit with in / out shardings; correct only)
# 14. ALiBi attention with heads over tp (dp2 x tp4).
C.gspmd("g.alibi_heads_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P("dp"), alibi_layer,
        (R(B, T, D), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(D, H, E, scale=0.4), R(H, E, D, scale=0.4)))

# 15. 2-D RoPE ViT attention with the patches over sp4.
C.gspmd("g.vit_rope2d_patches_sp.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), vit2d_attn,
        (R(2, GH * GW, H6, E6), R(2, GH * GW, H6, E6), R(2, GH * GW, H6, E6)))


# 16. T5 causal bucket bias with the sequence over sp4 and the gradient of
#     a squared-output loss with respect to the bias table (replicated).
def t5_table_grad(q, k, v, table):
    return jax.grad(lambda tb: jnp.sum(jnp.square(t5_causal_attn(q, k, v, tb))))(table)


C.gspmd("g.t5_bucket_bias_table_grad.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(None, "sp"), P()), P(),
        t5_table_grad, (R(2, 16, H3, E), R(2, 16, H3, E), R(2, 16, H3, E), R(NB, H3)))

# 17. the soft-capped ALiBi decoder training step of 12. under dp2 x tp4
#     shardings of parameters and optimizer state.
C.gspmd("g.train_alibi_softcap_decoder_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC12, SS12, P("dp")),
        (SPEC12, SS12, P()), step12, (P12, S12, TOK12))

# 18. sigmoid attention with keys over sp4 and the batch over dp2.
C.gspmd("g.sigmoid_attn_keys_sp.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp"), P("dp", "sp"), P("dp", "sp")), P("dp"),
        sigmoid_attn, (R(4, 16, 2, E), R(4, 16, 2, E), R(4, 16, 2, E)))

# 19. differential attention with heads over tp4 and the sequence over sp2.
C.gspmd("g.diff_attn_heads_tp_seq_sp.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(), P()), P(None, "sp"), diff_attn,
        (R(2, 8, D10), R(D10, H10, 2 * E10, scale=0.4), R(D10, H10, 2 * E10, scale=0.4),
         R(D10, H10, 2 * E10, scale=0.4), R(H10, 2 * E10, D10, scale=0.4), R(4, 4, scale=0.3),
         1.0 + R(2 * E10, scale=0.1)))

# 20. sliding-window attention of 7. with the sequence over sp4.
C.gspmd("g.sliding_window_seq_sp.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), swa_attn,
        (R(2, 32, H7, E), R(2, 32, H7, E), R(2, 32, H7, E)))

# 21. chunked-local attention of 8. with the sequence over sp4.
C.gspmd("g.chunked_local_attn.sp4", {"sp": 4}, (P(None, "sp"),) * 3, P(None, "sp"), chunked_attn,
        (R(2, 32, H7, E), R(2, 32, H7, E), R(2, 32, H7, E)))

# 22. NTK partial RoPE block of 4. with heads over tp4 and sequence over sp2.
C.gspmd("g.ntk_partial_rope_neox.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(None, "sp"), ntk_block,
        (R(2, 16, D4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4), R(D4, H4, E4, scale=0.4),
         R(H4, E4, D4, scale=0.4)))

C.finish()
