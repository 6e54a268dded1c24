"""samples/fresh81: an 81st batch of programs as a user writes them, on the theme of byte-level and hierarchical sequence models under sequence and tensor parallelism in current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. MEGABYTE global model, bytes over sp4 sharded by whole patches (2
    patches of 4 bytes per device): byte embeddings concatenated per patch,
    projected, shifted right by one patch (the previous device's last patch
    by ppermute, a learned pad patch on device 0), causal attention over the
    all_gather'd patches at global patch positions. Bugs: the shift from the
    next device, the pad patch on every device, the causal mask at local
    patch positions.
 2. MEGABYTE local model on sp2 x tp4: the global output per patch
    upsampled to per-byte context by a reshape, bytes shifted by one within
    each patch (a pad byte at every patch start), causal attention within
    the patch with heads over tp (wo row-parallel, psum over tp), LM head.
    Bugs: no psum over tp, the shift across patch boundaries (one flat
    shift of the local block), the per-byte context reshaped (D, P) and
    transposed.
 3. hashed n-gram byte embeddings (BLT style) on sp2 x tp4: bigram and
    trigram hashes of the bytes (a 2-byte left halo by ppermute, zeros
    before the start), two hash tables with their rows over tp (masked
    lookups + psum). Bugs: the halo from the right neighbour, the hash
    modulus the local table size, no psum over tp.
 4. entropy-threshold dynamic patching over sp4: entropy of a small byte
    LM's next-byte distribution, a boundary flag where it exceeds the
    threshold (and at byte 0), patch ids as a cumulative sum of flags plus
    the exclusive prefix of the all_gather'd per-device flag counts, patch
    mean pooling by one-hot matmuls psum'd over sp (sums and counts); the
    threshold is the row's mean entropy (psum'd over sp).
    Bugs: the cumulative sum restarted on every device, an inclusive
    prefix, counts not psum'd.
 5. Charformer GBST over sp4: a depthwise kernel-3 convolution (one-byte
    halos from both neighbours, zeros at the ends), mean pooling over blocks
    of 1, 2 and 4 bytes, block scores, upsampling by repeat, softmax over
    block sizes, then mean downsampling by 2. Bugs: no halo (the window
    ignores the neighbours' bytes), upsampling by tile instead of repeat,
    the halos swapped.
 6. Funnel-transformer pooling over sp4: queries mean-pooled by stride 2,
    keys / values the unpooled all_gather'd sequence, then upsampling by
    repeat and the pre-pooling residual. Bugs: upsampling repeated along
    the batch axis (then reshaped), keys from the local block only.
 7. strided convolutional downsampling of byte embeddings (kernel 4,
    stride 2, padding 1, lax.conv_general_dilated) over sp4: one-byte halos
    on either side by ppermute, VALID conv on the extended block. Bugs: no
    halo, halo directions swapped.
 8. patches straddling devices: 24 bytes over sp4 (6 per device), patches
    of 4 bytes, patch means by a one-hot segment sum at global patch ids
    psum'd over sp, a replicated global MLP, then the patch outputs gathered
    back to every byte. Bugs: local patch ids, no psum, the upsampling
    table built by tile instead of repeat.
 9. a MEGABYTE training step on dp2 x tp4 (check_vma=True): global MLP
    column / row parallel over tp, patch shift with a learned pad, local
    embedding shifted within patches, LM head, cross-entropy; jax.grad and
    optax.chain(add_decayed_weights, sgd with momentum). Bugs: loss not pmean'd over dp, the global model's
    row-parallel output not psum'd.
10. the global patch transformer on sp2 x tp4: patches over sp, heads over
    tp, written with lax.dot_general, causal mask at global patch
    positions, keys / values all_gather'd over sp, output psum'd over tp.
    Bugs: no psum over tp, the psum over sp.
11. dynamic patching from entropy jumps over sp4 (flag where the entropy
    rises over the previous byte's; the previous
    byte's entropy from the left neighbour by ppermute), patch ids by a
    Hillis-Steele scan of the per-device counts (ppermute by 1 then by 2,
    masked), patch max pooling by pmax. Bugs: no halo (the first byte
    compared against itself), the scan's second step shifted by 1 again,
    the cumulative sum restarted on every device.
12. patchify by reshape + dot in bf16 (patch features column-parallel
    over tp, f32 accumulation), GELU, un-patchify by a row-parallel dot and
    a reshape back to bytes (psum over tp in f32), sequence over sp (sp2 x
    tp4). Bugs: no psum over tp, the un-patchify reshaped (D, P) and
    transposed.
13. a BLT-style local encoder: causal sliding-window attention over bytes
    (window 4) with the sequence over sp4, the 3 keys / values before the
    block from the left neighbour by ppermute (masked before byte 0). Bugs:
    no halo (keys before the block masked out), the halo from the right
    neighbour.
14. the entropy patch pooling of 4. with the pooled patches psum_scatter'd
    onto sp4 (sums and counts), the prefix from a cumsum of the
    all_gather'd counts minus the own count. Bugs: no prefix, counts sliced
    from the local block (not reduced).
15. a multiplicative (Fibonacci) uint32 hash of byte trigrams, the whole
    byte sequence all_gather'd over sp4, front-padded by 2 and the device's
    window dynamic_slice'd, one hash table with rows over tp2 (sp4 x tp2).
    Bugs: no front pad (dynamic_slice clamps device 0's window), the window
    of the next block.
16. Funnel strided pooling (every other token as query) with a separate
    [CLS] token (global position 0) added to every pooled query, sequence
    over sp4, the [CLS] broadcast from device 0 by a masked psum. Bugs: the
    [CLS] from each device's first token, the stride started at 1.
17. patch -> byte upsampling: the baseline a stride-P transposed
    convolution (lax.conv_transpose) plus the patch vector repeated to its
    bytes; on device an einsum with the kernel taps reversed and a reshape,
    plus broadcast_to + reshape, patches over sp4. Bugs: taps not reversed,
    the broadcast axis put before the patch axis.
18. entropy boundaries above the midrange of the row's entropies (global
    max and min by pmax over sp4), each byte's patch length looked up from the psum'd integer
    per-patch counts. Bugs: a local max / min, local counts.
19. patches offset by half a patch (4-byte shift before patches of 8), so
    every patch straddles two devices (sp4): the previous device's last 4
    bytes by ppermute, zeros before the start. Bugs: the tail from the next
    device, the own tail as the head.
20. the patch shift of 1. with a cyclic ppermute (the wrapped patch masked
    out on device 0 by a one-hot of the device index), layer-normalised.
    Bugs: the wrapped patch kept, the mask on the last device.
21. a backward byte model: the sequence reversed across sp4 (lax.rev of
    the block and a ppermute i -> 3 - i), a causal kernel-3 convolution over
    the reversed bytes with a left halo, SiLU, reversed back. Bugs: the
    local reversal only (no mirror permutes), the halo from the wrong side.
22. jax.grad of a mean-square loss on the hashed n-gram embeddings of 3. in
    the byte embedding and the tp-sharded hash tables, sequence over sp2
    (check_vma=True, loss pmean'd over sp). Bug: the loss not pmean'd (the
    gradients the sum of the two sp shards' local-mean gradients).
23. a hashed bigram embedding, table rows over tp4, looked up with
    .at[].get(mode="fill") so rows owned elsewhere read as 0, tanh applied
    on each shard before the psum (correct: only the owner is nonzero and
    tanh(0) = 0), sequence over sp2 with a 1-byte halo. Bugs: clipped
    lookups without the mask, the psum over sp.
24. patch statistics on sp2 x tp4 with byte features over tp and the LM
    logits replicated over tp: the mean entropy (threshold and output) a
    psum over (sp, tp) divided by the tp size too, counts all_gather'd over
    sp and summed, pooled features psum_scatter'd over sp on the patch axis
    and all_gather'd back. Bugs: the threshold not divided by the tp size,
    the counts gathered over tp.
25. the global model's patch MLP in bf16 end to end (column-parallel w1,
    GELU, row-parallel w2, a bf16 psum over tp, residual), patches over
    sp2, tp4. Bugs: the residual inside the psum, the psum over sp.
26. bf16 patch pooling with patches straddling devices on sp8 (48 bytes,
    6 per device, patches of 16): bf16 per-patch sums by a one-hot matmul,
    a bf16 psum over sp, / 16, a bf16 projection. Bugs: each device's sums
    divided by its local length, a pmean instead of the psum.
27. a wide bf16 row-parallel projection over tp8 (hidden 256, a bf16
    psum of 8 partial sums) and an f32 RMS norm. Bug: the norm applied to
    the partial sums before the psum.
28. greedy patching with a maximum patch length (a new patch where the
    entropy exceeds mean + (max - mean) / 2 of the row, psum'd and pmax'd,
    or the run reaches 3 bytes), a
    sequential lax.scan whose carry crosses devices on sp4: each device
    scans its block for every possible incoming run length, the transfer
    tables are all_gather'd and composed in device order, and the device
    keeps the flags of its actual incoming run; patch ids by a prefix of
    the flag counts. Bugs: the carry restarted on every device, the
    composition in reverse device order.
GSPMD pairs (jax.jit with in/out shardings): the MEGABYTE global model of
1. (sp4); the hashed n-gram embeddings of 3. (sp2 x tp4); the GBST of 5.
(sp4); the funnel pooling of 6. (sp4); the strided conv of 7. (sp4); the
entropy patch pooling of 4. (sp4); the MEGABYTE training step of 9. with
optax.adamw (dp2 x tp4); the bf16 patchify of 12. (sp2 x tp4); the
sliding-window local encoder of 13. (sp4); the MEGABYTE local model of
2. (sp2 x tp4); the straddling patches of 8. (sp4); the Fibonacci hash of
15. (sp4 x tp2); the transposed-conv upsampling of 17. (sp4); the
half-patch shift of 19. (sp4); the backward conv of 21. with jnp.flip
(sp4); the n-gram table gradient of 22. (sp2 x tp4); a whole MEGABYTE forward
(global model of 1. then local model of 2.) with with_sharding_constraint
moving the per-byte context from patches over sp to features over tp
(sp2 x tp4); the bf16 patch MLP of 25. (sp2 x tp4); the bf16 pooling of
26. (sp8); the wide bf16 projection of 27. (tp8).
Numerics: every correct pair agrees with its baseline at rounding level
(f32 within ~2e-6); bug variants differ clearly (see "numerics" in the
manifest). First drafts of 4. and 11. used fixed entropy thresholds tuned
to the generator's logits: the checker's own random inputs then never
crossed them, so two bugs (counts not psum'd, no halo) were invisible to
its execution; the thresholds are now the row's mean entropy (4.) and any
rise (11.); likewise 18. first used 0.9 times the row's maximum (its
local-counts bug invisible to the checker's inputs), now the midrange;
28. first used the row's mean as its threshold: runs then seldom reached
the maximum length at a device boundary and both bugs left the
generator's inputs unchanged (the threshold is now higher).
Run from the repository root: bash samples/gen/run_fresh81.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh81.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh81.py"
C = Corpus("samples/fresh81", SCRIPT, "samples/gen/run_fresh81.sh", sys.argv[1:])
rng, R, I = seeded(8181)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def right(n):
    return [(i, i + 1) for i in range(n - 1)]  # device i -> i + 1, nothing into device 0


def left(n):
    return [(i + 1, i) for i in range(n - 1)]  # device i + 1 -> i, nothing into the last


def ln(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) * lax.rsqrt(jnp.var(x, -1, keepdims=True) + eps)


def attn(q, k, v, ok=None):
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(q.shape[-1])
    if ok is not None:
        s = jnp.where(ok, s, NEG)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


# ---------------------------------------------------------------------------
# 1. MEGABYTE global model, bytes over sp4 by whole patches.
B1, T1, PS1, V1, D1, G1, H1 = 2, 32, 4, 64, 4, 16, 2
NP1 = T1 // PS1


def mb_global(byt, emb, pad, wg, wq, wk, wv):
    b = byt.shape[0]
    h = emb[byt].reshape(b, -1, PS1 * D1) @ wg
    g = jnp.concatenate([jnp.broadcast_to(pad, (b, 1, G1)), h[:, :-1]], 1)
    q, k, v = (jnp.einsum("bnd,dhe->bnhe", g, w) for w in (wq, wk, wv))
    n = g.shape[1]
    return g + attn(q, k, v, jnp.tril(jnp.ones((n, n), bool))).reshape(b, n, G1)


def mb_global_sp(bug):
    def f(byt, emb, pad, wg, wq, wk, wv):
        b = byt.shape[0]
        h = emb[byt].reshape(b, -1, PS1 * D1) @ wg
        nl, me = h.shape[1], idx("sp")
        if bug == "pad-on-every-device":
            first = jnp.broadcast_to(pad, (b, 1, G1))
        else:
            prev = lax.ppermute(h[:, -1:], "sp", left(4) if bug == "shift-from-next-device" else right(4))
            first = jnp.where(me == 0, jnp.broadcast_to(pad, (b, 1, G1)), prev)
        g = jnp.concatenate([first, h[:, :-1]], 1)
        q, k, v = (jnp.einsum("bnd,dhe->bnhe", g, w) for w in (wq, wk, wv))
        k, v = (lax.all_gather(t, "sp", axis=1, tiled=True) for t in (k, v))
        qp = jnp.arange(nl) + (0 if bug == "local-patch-positions" else me * nl)
        ok = qp[:, None] >= jnp.arange(k.shape[1])[None, :]
        return g + attn(q, k, v, ok).reshape(b, nl, G1)
    return f


ARGS1 = (I(0, V1, B1, T1), R(V1, D1), R(G1, scale=0.5), R(PS1 * D1, G1, scale=0.4), R(G1, H1, 8, scale=0.3),
         R(G1, H1, 8, scale=0.3), R(G1, H1, 8, scale=0.3))
C.smap("s.megabyte_global_patch_shift.sp4", {"sp": 4}, mb_global_sp, (P(None, "sp"),) + (P(),) * 6, P(None, "sp"),
       mb_global, ARGS1,
       bugs=[("shift-from-next-device", ["wrong-permutation"]), ("pad-on-every-device", ["missing-collective"]),
             ("local-patch-positions", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. MEGABYTE local model on sp2 x tp4.
B2, T2, PS2, V2, D2, H2, E2 = 2, 32, 4, 32, 8, 8, 4
NP2 = T2 // PS2


def mb_local(byt, gctx, lemb, lpad, wq, wk, wv, wo, wout):
    b, t = byt.shape
    ctx = gctx.reshape(b, -1, PS2, D2)
    xb = lemb[byt].reshape(b, -1, PS2, D2)
    prev = jnp.concatenate([jnp.broadcast_to(lpad, xb[:, :, :1].shape), xb[:, :, :-1]], 2)
    z = prev + ctx
    q, k, v = (jnp.einsum("bnpd,dhe->bnphe", z, w) for w in (wq, wk, wv))
    s = jnp.einsum("bnqhe,bnkhe->bnhqk", q, k) / np.sqrt(E2)
    s = jnp.where(jnp.tril(jnp.ones((PS2, PS2), bool)), s, NEG)
    o = jnp.einsum("bnhqk,bnkhe->bnqhe", jax.nn.softmax(s, -1), v)
    z = z + jnp.einsum("bnphe,hed->bnpd", o, wo)
    return (z @ wout).reshape(b, t, -1)


def mb_local_tp(bug):
    def f(byt, gctx, lemb, lpad, wq, wk, wv, wo, wout):
        b, t = byt.shape
        if bug == "context-transposed":
            ctx = jnp.swapaxes(gctx.reshape(b, -1, D2, PS2), -1, -2)
        else:
            ctx = gctx.reshape(b, -1, PS2, D2)
        e = lemb[byt]
        if bug == "shift-across-patches":
            prev = jnp.concatenate([jnp.broadcast_to(lpad, (b, 1, D2)), e[:, :-1]], 1).reshape(b, -1, PS2, D2)
        else:
            xb = e.reshape(b, -1, PS2, D2)
            prev = jnp.concatenate([jnp.broadcast_to(lpad, xb[:, :, :1].shape), xb[:, :, :-1]], 2)
        z = prev + ctx
        q, k, v = (jnp.einsum("bnpd,dhe->bnphe", z, w) for w in (wq, wk, wv))
        s = jnp.einsum("bnqhe,bnkhe->bnhqk", q, k) / np.sqrt(E2)
        s = jnp.where(jnp.tril(jnp.ones((PS2, PS2), bool)), s, NEG)
        o = jnp.einsum("bnhqk,bnkhe->bnqhe", jax.nn.softmax(s, -1), v)
        y = jnp.einsum("bnphe,hed->bnpd", o, wo)
        z = z + (y if bug == "no-psum-tp" else psum(y, "tp"))
        return (z @ wout).reshape(b, t, -1)
    return f


ARGS2 = (I(0, V2, B2, T2), R(B2, NP2, PS2 * D2), R(V2, D2), R(D2, scale=0.5), R(D2, H2, E2, scale=0.4),
         R(D2, H2, E2, scale=0.4), R(D2, H2, E2, scale=0.4), R(H2, E2, D2, scale=0.3), R(D2, V2, scale=0.4))
C.smap("s.megabyte_local_within_patch_heads_tp.sp2xtp4", {"sp": 2, "tp": 4}, mb_local_tp,
       (P(None, "sp"), P(None, "sp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()),
       P(None, "sp"), mb_local, ARGS2,
       bugs=[("no-psum-tp", ["missing-all-reduce"]), ("shift-across-patches", ["wrong-offset"]),
             ("context-transposed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 3. hashed n-gram byte embeddings, sequence over sp2, hash-table rows over tp4.
B3, T3, D3, M3 = 2, 16, 8, 64


def ngram_hashes(ext, t):
    """bigram / trigram hashes of the last t positions of ext (zeros pad the front)."""
    b0, b1, b2 = ext[:, -t:], ext[:, -t - 1:-1], ext[:, -t - 2:-2]
    return b0 + 257 * b1, b0 + 257 * b1 + 65537 * b2


def ngram_embed(byt, emb, tab2, tab3):
    ext = jnp.concatenate([jnp.zeros((byt.shape[0], 2), byt.dtype), byt], 1)
    h2, h3 = ngram_hashes(ext, byt.shape[1])
    return emb[byt] + tab2[h2 % M3] + tab3[h3 % M3]


def ngram_embed_sp_tp(bug):
    def f(byt, emb, tab2, tab3):
        halo = lax.ppermute(byt[:, -2:], "sp", left(2) if bug == "halo-from-right" else right(2))
        ext = jnp.concatenate([halo, byt], 1)
        h2, h3 = ngram_hashes(ext, byt.shape[1])
        ml = tab2.shape[0]
        mod = ml if bug == "modulus-local-rows" else M3

        def lookup(tab, h):
            r = h % mod - idx("tp") * ml
            ok = (r >= 0) & (r < ml)
            return jnp.where(ok[..., None], tab[jnp.clip(r, 0, ml - 1)], 0.0)
        part = lookup(tab2, h2) + lookup(tab3, h3)
        return emb[byt] + (part if bug == "no-psum-tp" else psum(part, "tp"))
    return f


ARGS3 = (I(0, 256, B3, T3), R(256, D3), R(M3, D3), R(M3, D3))
C.smap("s.hashed_ngram_byte_embedding.sp2xtp4", {"sp": 2, "tp": 4}, ngram_embed_sp_tp,
       (P(None, "sp"), P(), P("tp"), P("tp")), P(None, "sp"), ngram_embed, ARGS3,
       bugs=[("halo-from-right", ["wrong-permutation"]), ("modulus-local-rows", ["wrong-offset"]),
             ("no-psum-tp", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. entropy-threshold dynamic patching over sp4, patch mean pooling.
B4, T4, V4, D4 = 2, 32, 8, 4
LG4 = R(B4, T4, V4, scale=1.5)


def entropy(lg):
    lp = jax.nn.log_softmax(lg, -1)
    return -jnp.sum(jnp.exp(lp) * lp, -1)


def entropy_pool(lg, x):
    e = entropy(lg)
    flag = (e > e.mean(1, keepdims=True)) | (jnp.arange(lg.shape[1]) == 0)[None, :]
    pid = jnp.cumsum(flag.astype(jnp.int32), 1) - 1
    oh = jax.nn.one_hot(pid, T4, dtype=x.dtype)
    s = jnp.einsum("btp,btd->bpd", oh, x)
    c = oh.sum(1)[..., None]
    return s / jnp.maximum(c, 1.0)


def entropy_pool_sp(bug):
    def f(lg, x):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        thr = psum(e.sum(1, keepdims=True), "sp") / (4 * tl)
        flag = (e > thr) | ((me * tl + jnp.arange(tl)) == 0)[None, :]
        loc = jnp.cumsum(flag.astype(jnp.int32), 1)
        tot = lax.all_gather(loc[:, -1], "sp")  # (4, b)
        keep = (jnp.arange(4) <= me) if bug == "inclusive-prefix" else (jnp.arange(4) < me)
        pre = 0 if bug == "cumsum-restarted-per-device" else jnp.sum(jnp.where(keep[:, None], tot, 0), 0)[:, None]
        pid = loc + pre - 1
        oh = jax.nn.one_hot(pid, T4, dtype=x.dtype)
        s = psum(jnp.einsum("btp,btd->bpd", oh, x), "sp")
        c = oh.sum(1)[..., None]
        c = c if bug == "counts-not-psummed" else psum(c, "sp")
        return s / jnp.maximum(c, 1.0)
    return f


ARGS4 = (LG4, R(B4, T4, D4))
C.smap("s.entropy_patch_ids_mean_pool.sp4", {"sp": 4}, entropy_pool_sp, (P(None, "sp"), P(None, "sp")), P(),
       entropy_pool, ARGS4,
       bugs=[("cumsum-restarted-per-device", ["missing-collective"]), ("inclusive-prefix", ["wrong-offset"]),
             ("counts-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. Charformer GBST over sp4.
B5, T5, D5 = 2, 32, 8
BLOCKS5 = (1, 2, 4)


def dwconv3(xp, cw):
    """xp (b, t + 2, d) already padded by one on each side."""
    return xp[:, :-2] * cw[0] + xp[:, 1:-1] * cw[1] + xp[:, 2:] * cw[2]


def gbst_core(xc, ws, up):
    b, t, d = xc.shape
    reps, scs = [], []
    for bs in BLOCKS5:
        pooled = xc.reshape(b, t // bs, bs, d).mean(2)
        sc = pooled @ ws
        reps.append(up(pooled, bs))
        scs.append(up(sc[..., None], bs)[..., 0])
    p = jax.nn.softmax(jnp.stack(scs, -1), -1)
    xt = jnp.einsum("btk,kbtd->btd", p, jnp.stack(reps))
    return xt.reshape(b, t // 2, 2, d).mean(2)


def repeat_up(a, bs):
    return jnp.repeat(a, bs, axis=1)


def gbst(x, cw, ws):
    xp = jnp.pad(x, ((0, 0), (1, 1), (0, 0)))
    return gbst_core(dwconv3(xp, cw), ws, repeat_up)


def gbst_sp(bug):
    def f(x, cw, ws):
        if bug == "conv-no-halo":
            lh = rh = jnp.zeros_like(x[:, :1])
        else:
            a, b = (left(4), right(4)) if bug == "halos-swapped" else (right(4), left(4))
            lo, hi = (x[:, :1], x[:, -1:]) if bug == "halos-swapped" else (x[:, -1:], x[:, :1])
            lh = lax.ppermute(lo, "sp", a)  # zeros on device 0 (no sender)
            rh = lax.ppermute(hi, "sp", b)
        xc = dwconv3(jnp.concatenate([lh, x, rh], 1), cw)
        up = (lambda a, bs: jnp.tile(a, (1, bs, 1))) if bug == "upsample-tile" else repeat_up
        return gbst_core(xc, ws, up)
    return f


ARGS5 = (R(B5, T5, D5), R(3, D5, scale=0.6), R(D5, scale=1.0))
C.smap("s.charformer_gbst_blocks_124.sp4", {"sp": 4}, gbst_sp, (P(None, "sp"), P(), P()), P(None, "sp"), gbst, ARGS5,
       bugs=[("conv-no-halo", ["missing-collective"]), ("upsample-tile", ["wrong-permutation"]),
             ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. Funnel-transformer pooling and upsampling over sp4.
B6, T6, D6, H6, E6 = 2, 16, 8, 2, 4


def funnel(h, wq, wk, wv, wo):
    b, t, d = h.shape
    hp = h.reshape(b, t // 2, 2, d).mean(2)
    q = jnp.einsum("btd,dhe->bthe", hp, wq)
    k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wk, wv))
    hp = hp + jnp.einsum("bthe,hed->btd", attn(q, k, v), wo)
    return h + jnp.repeat(hp, 2, axis=1)


def funnel_sp(bug):
    def f(h, wq, wk, wv, wo):
        b, t, d = h.shape
        hp = h.reshape(b, t // 2, 2, d).mean(2)
        q = jnp.einsum("btd,dhe->bthe", hp, wq)
        k, v = (jnp.einsum("btd,dhe->bthe", h, w) for w in (wk, wv))
        if bug != "keys-local-only":
            k, v = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        hp = hp + jnp.einsum("bthe,hed->btd", attn(q, k, v), wo)
        if bug == "upsample-batch-axis":
            return h + jnp.repeat(hp, 2, axis=0).reshape(b, t, d)
        return h + jnp.repeat(hp, 2, axis=1)
    return f


ARGS6 = (R(B6, T6, D6), R(D6, H6, E6, scale=0.4), R(D6, H6, E6, scale=0.4), R(D6, H6, E6, scale=0.4),
         R(H6, E6, D6, scale=0.4))
C.smap("s.funnel_pool_queries_upsample.sp4", {"sp": 4}, funnel_sp, (P(None, "sp"),) + (P(),) * 4, P(None, "sp"),
       funnel, ARGS6,
       bugs=[("upsample-batch-axis", ["wrong-permutation"]), ("keys-local-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. strided convolutional downsampling of bytes over sp4.
B7, T7, C7, O7 = 2, 32, 8, 12
DN7 = ("NWC", "WIO", "NWC")


def strided_down(byt, emb, k, bias):
    x = emb[byt]
    y = lax.conv_general_dilated(x, k, (2,), [(1, 1)], dimension_numbers=DN7)
    return jax.nn.gelu(y + bias)


def strided_down_sp(bug):
    def f(byt, emb, k, bias):
        x = emb[byt]
        if bug == "no-halo":
            lh = rh = jnp.zeros_like(x[:, :1])
        else:
            a, b = (left(4), right(4)) if bug == "halos-swapped" else (right(4), left(4))
            lh = lax.ppermute(x[:, -1:], "sp", a)
            rh = lax.ppermute(x[:, :1], "sp", b)
        xe = jnp.concatenate([lh, x, rh], 1)
        y = lax.conv_general_dilated(xe, k, (2,), "VALID", dimension_numbers=DN7)
        return jax.nn.gelu(y + bias)
    return f


ARGS7 = (I(0, 256, B7, T7), R(256, C7), R(4, C7, O7, scale=0.3), R(O7, scale=0.1))
C.smap("s.strided_conv_byte_downsample.sp4", {"sp": 4}, strided_down_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), strided_down, ARGS7,
       bugs=[("no-halo", ["missing-collective"]), ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. patches straddling devices: 24 bytes over sp4, patches of 4.
B8, T8, PS8, D8, F8 = 2, 24, 4, 8, 16
NP8 = T8 // PS8


def straddle(x, w1, w2):
    pm = x.reshape(x.shape[0], NP8, PS8, D8).mean(2)
    g = jax.nn.gelu(pm @ w1) @ w2
    return x + jnp.repeat(g, PS8, axis=1)


def straddle_sp(bug):
    def f(x, w1, w2):
        tl = x.shape[1]
        pos = jnp.arange(tl) + (0 if bug == "local-patch-ids" else idx("sp") * tl)
        oh = jax.nn.one_hot(pos // PS8, NP8, dtype=x.dtype)
        s = jnp.einsum("tp,btd->bpd", oh, x) / PS8
        pm = s if bug == "no-psum" else psum(s, "sp")
        g = jax.nn.gelu(pm @ w1) @ w2
        table = jnp.tile(g, (1, PS8, 1)) if bug == "upsample-tile" else jnp.repeat(g, PS8, axis=1)
        gpos = jnp.arange(tl) + idx("sp") * tl
        return x + table[:, gpos]
    return f


ARGS8 = (R(B8, T8, D8), R(D8, F8, scale=0.4), R(F8, D8, scale=0.4))
C.smap("s.patches_straddling_devices.sp4", {"sp": 4}, straddle_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       straddle, ARGS8,
       bugs=[("local-patch-ids", ["wrong-offset"]), ("no-psum", ["missing-all-reduce"]),
             ("upsample-tile", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 9. a MEGABYTE training step on dp2 x tp4 (check_vma=True), decayed weights + sgd momentum.
B9, T9, PS9, V9, D9, F9 = 4, 16, 4, 16, 4, 32


def init9():
    return {"emb": R(V9, D9, scale=0.5), "gpad": R(PS9 * D9, scale=0.3), "w1": R(PS9 * D9, F9, scale=0.3),
            "w2": R(F9, PS9 * D9, scale=0.3), "lemb": R(V9, D9, scale=0.5), "lpad": R(D9, scale=0.3),
            "wout": R(D9, V9, scale=0.4)}


SPEC9 = {"emb": P(), "gpad": P(), "w1": P(None, "tp"), "w2": P("tp"), "lemb": P(), "lpad": P(), "wout": P()}


def mb_loss(p, byt, tsum=lambda y: y):
    b, t = byt.shape
    pe = p["emb"][byt].reshape(b, -1, PS9 * D9)
    gin = jnp.concatenate([jnp.broadcast_to(p["gpad"], (b, 1, PS9 * D9)), pe[:, :-1]], 1)
    gout = gin + tsum(jax.nn.gelu(gin @ p["w1"]) @ p["w2"])
    xb = p["lemb"][byt].reshape(b, -1, PS9, D9)
    prev = jnp.concatenate([jnp.broadcast_to(p["lpad"], xb[:, :, :1].shape), xb[:, :, :-1]], 2)
    h = ln(prev + gout.reshape(b, -1, PS9, D9))
    lg = (h @ p["wout"]).reshape(b, t, V9)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, byt))


OPT9 = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.2, momentum=0.9))


def step9(p, s, byt):
    l, g = jax.value_and_grad(mb_loss)(p, byt)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def step9_sm(bug):
    def f(p, s, byt):
        def loss(p):
            if bug == "global-no-psum":
                return pmean(mb_loss(p, byt), ("dp", "tp"))
            lo = mb_loss(p, byt, lambda y: psum(y, "tp"))
            return lo if bug == "loss-not-pmeaned" else pmean(lo, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT9.update(g, s, p)
        if bug == "loss-not-pmeaned":
            l = pmean(l, "dp")
        return optax.apply_updates(p, u), s, l
    return f


P9 = init9()
S9 = OPT9.init(P9)
SS9 = state_specs(S9, SPEC9)
ARGS9 = (P9, S9, I(0, V9, B9, T9))
C.smap("s.megabyte_train_step_sgd_decay.dp2xtp4", {"dp": 2, "tp": 4}, step9_sm, (SPEC9, SS9, P("dp")), (SPEC9, SS9, P()),
       step9, ARGS9, bugs=[("loss-not-pmeaned", ["missing-all-reduce"]), ("global-no-psum", ["missing-all-reduce"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 10. global patch transformer on sp2 x tp4 with lax.dot_general.
B10, N10, G10, H10, E10 = 2, 8, 16, 8, 4


def dg(a, b, ca, cb, ba=(), bb=()):
    return lax.dot_general(a, b, ((ca, cb), (ba, bb)))


def global_block(g, wq, wk, wv, wo):
    q, k, v = (dg(g, w, (2,), (0,)) for w in (wq, wk, wv))  # (b, n, h, e)
    n = g.shape[1]
    return g + jnp.einsum("bnhe,hed->bnd", attn(q, k, v, jnp.tril(jnp.ones((n, n), bool))), wo)


def global_block_sp_tp(bug):
    def f(g, wq, wk, wv, wo):
        q, k, v = (dg(g, w, (2,), (0,)) for w in (wq, wk, wv))
        k, v = (lax.all_gather(a, "sp", axis=1, tiled=True) for a in (k, v))
        nl = g.shape[1]
        qp = idx("sp") * nl + jnp.arange(nl)
        ok = qp[:, None] >= jnp.arange(k.shape[1])[None, :]
        o = attn(q, k, v, ok)  # (b, nl, h, e)
        y = dg(o, wo, (2, 3), (0, 1))
        if bug == "no-psum-tp":
            return g + y
        return g + psum(y, "sp" if bug == "psum-over-sp" else "tp")
    return f


ARGS10 = (R(B10, N10, G10), R(G10, H10, E10, scale=0.3), R(G10, H10, E10, scale=0.3), R(G10, H10, E10, scale=0.3),
          R(H10, E10, G10, scale=0.3))
C.smap("s.global_patch_transformer_dot_general.sp2xtp4", {"sp": 2, "tp": 4}, global_block_sp_tp,
       (P(None, "sp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp")), P(None, "sp"), global_block, ARGS10,
       bugs=[("no-psum-tp", ["missing-all-reduce"]), ("psum-over-sp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 11. dynamic patching from entropy jumps, Hillis-Steele prefix, max pooling.
B11, T11, V11, D11 = 2, 32, 8, 4
LG11 = R(B11, T11, V11, scale=1.5)
THR11 = 0.0  # a boundary wherever the entropy rises


def jump_patch_max(lg, x):
    e = entropy(lg)
    prev = jnp.concatenate([e[:, :1], e[:, :-1]], 1)
    flag = (e - prev > THR11) | (jnp.arange(lg.shape[1]) == 0)[None, :]
    pid = jnp.cumsum(flag.astype(jnp.int32), 1) - 1
    oh = jax.nn.one_hot(pid, T11, dtype=bool)
    m = jnp.where(oh[..., None], x[:, :, None, :], -jnp.inf).max(1)
    return pid, jnp.where(jnp.isfinite(m), m, 0.0)


def jump_patch_max_sp(bug):
    def f(lg, x):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        if bug == "no-halo":
            ep = e[:, :1]
        else:
            ep = jnp.where(me == 0, e[:, :1], lax.ppermute(e[:, -1:], "sp", right(4)))
        prev = jnp.concatenate([ep, e[:, :-1]], 1)
        flag = (e - prev > THR11) | ((me * tl + jnp.arange(tl)) == 0)[None, :]
        loc = jnp.cumsum(flag.astype(jnp.int32), 1)
        cnt = loc[:, -1]
        # inclusive Hillis-Steele scan of the counts over the 4 devices
        inc = cnt
        for d in (1, 1 if bug == "scan-second-step-by-one" else 2):
            got = lax.ppermute(inc, "sp", [(i, i + d) for i in range(4 - d)])
            inc = inc + jnp.where(me >= d, got, 0)
        pre = 0 if bug == "cumsum-restarted-per-device" else (inc - cnt)[:, None]
        pid = loc + pre - 1
        oh = jax.nn.one_hot(pid, T11, dtype=bool)
        m = pmax(jnp.where(oh[..., None], x[:, :, None, :], -jnp.inf).max(1), "sp")
        return pid, jnp.where(jnp.isfinite(m), m, 0.0)
    return f


ARGS11 = (LG11, R(B11, T11, D11))
C.smap("s.entropy_jump_patches_hillis_steele_max.sp4", {"sp": 4}, jump_patch_max_sp, (P(None, "sp"), P(None, "sp")),
       (P(None, "sp"), P()), jump_patch_max, ARGS11,
       bugs=[("no-halo", ["missing-collective"]), ("scan-second-step-by-one", ["wrong-offset"]),
             ("cumsum-restarted-per-device", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. patchify by reshape + dot in bf16 (patch features over tp, column
#     parallel), a GELU, and un-patchify (a stride-P transposed projection
#     written as dot + reshape, row parallel, psum over tp in f32), bytes
#     over dp (sp2 x tp4 mesh: dp named "sp" here is the sequence).
B12, T12, PS12, D12, F12 = 2, 32, 4, 8, 16


def patch_unpatch(x, wd, wu):
    b, t, d = x.shape
    pt = x.reshape(b, t // PS12, PS12 * d).astype(jnp.bfloat16)
    h = jax.nn.gelu(jnp.dot(pt, wd.astype(jnp.bfloat16), preferred_element_type=jnp.float32))
    up = jnp.dot(h, wu)  # (b, n, P * d)
    return x + up.reshape(b, t, d)


def patch_unpatch_sp_tp(bug):
    def f(x, wd, wu):
        b, t, d = x.shape
        pt = x.reshape(b, t // PS12, PS12 * d).astype(jnp.bfloat16)
        h = jax.nn.gelu(jnp.dot(pt, wd.astype(jnp.bfloat16), preferred_element_type=jnp.float32))
        up = jnp.dot(h, wu)
        if bug != "no-psum-tp":
            up = psum(up, "tp")
        if bug == "unpatch-axes-swapped":
            return x + jnp.swapaxes(up.reshape(b, t // PS12, d, PS12), 2, 3).reshape(b, t, d)
        return x + up.reshape(b, t, d)
    return f


ARGS12 = (R(B12, T12, D12), R(PS12 * D12, F12, scale=0.3), R(F12, PS12 * D12, scale=0.3))
C.smap("s.patchify_bf16_unpatchify_rowparallel.sp2xtp4", {"sp": 2, "tp": 4}, patch_unpatch_sp_tp,
       (P(None, "sp"), P(None, "tp"), P("tp")), P(None, "sp"), patch_unpatch, ARGS12,
       bugs=[("no-psum-tp", ["missing-all-reduce"]), ("unpatch-axes-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 13. BLT-style local encoder: causal sliding-window attention over bytes
#     (window 4: the byte and the 3 before it), sequence over sp4, the 3
#     keys / values before the block from the left neighbour by ppermute.
B13, T13, D13, H13, E13, W13 = 2, 32, 8, 2, 4, 4


def swa_bytes(x, wq, wk, wv):
    q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
    t = jnp.arange(x.shape[1])
    ok = (t[:, None] >= t[None, :]) & (t[:, None] - t[None, :] < W13)
    return x + attn(q, k, v, ok).reshape(x.shape)


def swa_bytes_sp(bug):
    def f(x, wq, wk, wv):
        q, k, v = (jnp.einsum("btd,dhe->bthe", x, w) for w in (wq, wk, wv))
        tl, me, hw = x.shape[1], idx("sp"), W13 - 1
        perm = left(4) if bug == "halo-from-right" else right(4)
        if bug == "no-halo":
            kh, vh = jnp.zeros_like(k[:, :hw]), jnp.zeros_like(v[:, :hw])
        else:
            kh, vh = (lax.ppermute(a[:, -hw:], "sp", perm) for a in (k, v))
        ke, ve = jnp.concatenate([kh, k], 1), jnp.concatenate([vh, v], 1)
        tq = me * tl + jnp.arange(tl)
        tk = me * tl - hw + jnp.arange(tl + hw)
        ok = (tq[:, None] >= tk[None, :]) & (tq[:, None] - tk[None, :] < W13) & (tk[None, :] >= 0)
        if bug == "no-halo":
            ok = ok & (jnp.arange(tl + hw) >= hw)[None, :]
        return x + attn(q, ke, ve, ok).reshape(x.shape)
    return f


ARGS13 = (R(B13, T13, D13), R(D13, H13, E13, scale=0.5), R(D13, H13, E13, scale=0.5), R(D13, H13, E13, scale=0.5))
C.smap("s.blt_local_encoder_sliding_window.sp4", {"sp": 4}, swa_bytes_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), swa_bytes, ARGS13,
       bugs=[("no-halo", ["missing-collective"]), ("halo-from-right", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 14. entropy patch pooling with the pooled patches reduce-scattered onto sp4
#     (psum_scatter over the patch axis; sums and counts).
def entropy_pool_rs(bug):
    def f(lg, x):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        thr = psum(e.sum(1, keepdims=True), "sp") / (4 * tl)
        flag = (e > thr) | ((me * tl + jnp.arange(tl)) == 0)[None, :]
        loc = jnp.cumsum(flag.astype(jnp.int32), 1)
        tot = lax.all_gather(loc[:, -1], "sp", axis=1)  # (b, 4)
        pre = 0 if bug == "no-prefix" else jnp.cumsum(tot, 1)[:, me][:, None] - loc[:, -1:]
        oh = jax.nn.one_hot(loc + pre - 1, T4, dtype=x.dtype)
        s = lax.psum_scatter(jnp.einsum("btp,btd->bpd", oh, x), "sp", scatter_dimension=1, tiled=True)
        c = oh.sum(1)[..., None]
        if bug == "counts-local-block":
            c = lax.dynamic_slice_in_dim(c, me * (T4 // 4), T4 // 4, 1)
        else:
            c = lax.psum_scatter(c, "sp", scatter_dimension=1, tiled=True)
        return s / jnp.maximum(c, 1.0)
    return f


C.smap("s.entropy_patch_pool_reduce_scatter.sp4", {"sp": 4}, entropy_pool_rs, (P(None, "sp"), P(None, "sp")),
       P(None, "sp"), entropy_pool, (R(B4, T4, V4, scale=1.5), R(B4, T4, D4)),
       bugs=[("no-prefix", ["missing-collective"]), ("counts-local-block", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 15. multiplicative (Fibonacci) uint32 hash of byte trigrams; the whole byte
#     sequence all_gather'd over sp4, front-padded by 2 and the device's
#     window dynamic_slice'd; one hash table with rows over tp2 (sp4 x tp2).
B15, T15, D15, M15 = 2, 32, 8, 32


def fib_hash(b2, b1, b0):
    k = (b2.astype(jnp.uint32) << 16) | (b1.astype(jnp.uint32) << 8) | b0.astype(jnp.uint32)
    return ((k * jnp.uint32(2654435761)) >> 27).astype(jnp.int32)  # 5 bits: [0, 32)


def fib_embed(byt, emb, tab):
    ext = jnp.pad(byt, ((0, 0), (2, 0)))
    h = fib_hash(ext[:, :-2], ext[:, 1:-1], ext[:, 2:])
    return emb[byt] + tab[h]


def fib_embed_sp_tp(bug):
    def f(byt, emb, tab):
        tl, ml = byt.shape[1], tab.shape[0]
        full = lax.all_gather(byt, "sp", axis=1, tiled=True)
        if bug == "no-front-pad":
            win = lax.dynamic_slice_in_dim(full, idx("sp") * tl - 2, tl + 2, 1)  # clamped on device 0
        else:
            ext = jnp.pad(full, ((0, 0), (2, 0)))
            start = (idx("sp") + (1 if bug == "window-of-next-block" else 0)) % 4 * tl
            win = lax.dynamic_slice_in_dim(ext, start, tl + 2, 1)
        h = fib_hash(win[:, :-2], win[:, 1:-1], win[:, 2:])
        r = h - idx("tp") * ml
        part = jnp.where(((r >= 0) & (r < ml))[..., None], tab[jnp.clip(r, 0, ml - 1)], 0.0)
        return emb[byt] + psum(part, "tp")
    return f


ARGS15 = (I(0, 256, B15, T15), R(256, D15), R(M15, D15))
C.smap("s.fibonacci_hash_trigram_gathered_window.sp4xtp2", {"sp": 4, "tp": 2}, fib_embed_sp_tp,
       (P(None, "sp"), P(), P("tp")), P(None, "sp"), fib_embed, ARGS15,
       bugs=[("no-front-pad", ["wrong-offset"]), ("window-of-next-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. Funnel strided pooling (every other token as query) with a separate
#     [CLS] token (global position 0) kept unpooled and added to every
#     pooled query; sequence over sp4, the [CLS] broadcast from device 0 by a
#     masked psum.
B16, T16, D16 = 2, 16, 8


def funnel_strided(h, wq, wk, wv):
    cls = h[:, :1]
    hq = h[:, ::2] + cls
    q, k, v = (jnp.einsum("btd,dhe->bthe", a, w) for a, w in ((hq, wq), (h, wk), (h, wv)))
    return hq + attn(q, k, v).reshape(hq.shape)


def funnel_strided_sp(bug):
    def f(h, wq, wk, wv):
        me = idx("sp")
        if bug == "cls-local-first":
            cls = h[:, :1]
        else:
            cls = psum(jnp.where(me == 0, h[:, :1], 0.0), "sp")
        hq = h[:, 1::2] + cls if bug == "stride-from-one" else h[:, ::2] + cls
        q = jnp.einsum("btd,dhe->bthe", hq, wq)
        k, v = (lax.all_gather(jnp.einsum("btd,dhe->bthe", h, w), "sp", axis=1, tiled=True) for w in (wk, wv))
        return hq + attn(q, k, v).reshape(hq.shape)
    return f


ARGS16 = (R(B16, T16, D16), R(D16, 2, 4, scale=0.5), R(D16, 2, 4, scale=0.5), R(D16, 2, 4, scale=0.5))
C.smap("s.funnel_strided_pool_separate_cls.sp4", {"sp": 4}, funnel_strided_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), funnel_strided, ARGS16,
       bugs=[("cls-local-first", ["missing-collective"]), ("stride-from-one", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. patch -> byte upsampling by a stride-P transposed convolution in the
#     baseline (lax.conv_transpose), written on device as an einsum with the
#     kernel taps reversed and a reshape, patches over sp4, plus a residual
#     of the patch vector broadcast to its bytes (broadcast_to + reshape).
B17, N17, G17, PS17, D17 = 2, 8, 8, 4, 6


def up_tconv(g, w, wr):
    y = lax.conv_transpose(g, w, (PS17,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"))
    return y + jnp.repeat(g @ wr, PS17, axis=1)


def up_tconv_sp(bug):
    def f(g, w, wr):
        b, n, _ = g.shape
        taps = w if bug == "taps-not-reversed" else w[::-1]
        y = jnp.einsum("bnc,kco->bnko", g, taps).reshape(b, n * PS17, -1)
        r = g @ wr
        if bug == "broadcast-patch-axis-inner":
            rb = jnp.broadcast_to(r[:, None], (b, PS17, n, D17))
        else:
            rb = jnp.broadcast_to(r[:, :, None], (b, n, PS17, D17))
        return y + rb.reshape(b, n * PS17, D17)
    return f


ARGS17 = (R(B17, N17, G17), R(PS17, G17, D17, scale=0.4), R(G17, D17, scale=0.4))
C.smap("s.transposed_conv_upsample_as_einsum.sp4", {"sp": 4}, up_tconv_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), up_tconv, ARGS17,
       bugs=[("taps-not-reversed", ["wrong-permutation"]), ("broadcast-patch-axis-inner", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 18. entropy boundaries above the row's midrange (global max and min by
#     pmax over sp4), then every byte's patch length looked up from
#     the psum'd per-patch counts.
B18, T18, V18 = 2, 32, 6


def patch_lengths(lg):
    e = entropy(lg)
    mid = 0.5 * (e.max(1, keepdims=True) + e.min(1, keepdims=True))
    flag = (e > mid) | (jnp.arange(lg.shape[1]) == 0)[None, :]
    pid = jnp.cumsum(flag.astype(jnp.int32), 1) - 1
    cnt = jax.nn.one_hot(pid, T18, dtype=jnp.int32).sum(1)
    return jnp.take_along_axis(cnt, pid, 1)


def patch_lengths_sp(bug):
    def f(lg):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        mx, mn = e.max(1, keepdims=True), e.min(1, keepdims=True)
        if bug != "local-max":
            mx, mn = pmax(mx, "sp"), -pmax(-mn, "sp")
        flag = (e > 0.5 * (mx + mn)) | ((me * tl + jnp.arange(tl)) == 0)[None, :]
        loc = jnp.cumsum(flag.astype(jnp.int32), 1)
        tot = lax.all_gather(loc[:, -1], "sp")
        pid = loc - 1 + jnp.sum(jnp.where((jnp.arange(4) < me)[:, None], tot, 0), 0)[:, None]
        cnt = jax.nn.one_hot(pid, T18, dtype=jnp.int32).sum(1)
        if bug != "local-counts":
            cnt = psum(cnt, "sp")
        return jnp.take_along_axis(cnt, pid, 1)
    return f


C.smap("s.entropy_relative_max_patch_lengths.sp4", {"sp": 4}, patch_lengths_sp, (P(None, "sp"),), P(None, "sp"),
       patch_lengths, (R(B18, T18, V18, scale=1.0),),
       bugs=[("local-max", ["missing-all-reduce"]), ("local-counts", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 19. patches offset by half a patch (a 4-byte BOS shift before patches of
#     8): patch p holds bytes [8p - 4, 8p + 4), so every patch straddles two
#     devices' blocks (sp4, 8 bytes per device); the previous device's last
#     4 bytes come by ppermute, zeros before the start.
B19, T19, PS19, D19, G19 = 2, 32, 8, 4, 12


def half_shift_patches(x, w):
    b, t, d = x.shape
    xs = jnp.pad(x, ((0, 0), (PS19 // 2, 0), (0, 0)))[:, :t]
    return jnp.tanh(xs.reshape(b, t // PS19, PS19 * d) @ w)


def half_shift_sp(bug):
    def f(x, w):
        b, tl, d = x.shape
        h = PS19 // 2
        perm = left(4) if bug == "tail-from-next-device" else right(4)
        tail = lax.ppermute(x[:, -h:], "sp", perm)
        head = x[:, -h:] if bug == "own-tail-as-head" else x[:, :h]
        xs = jnp.concatenate([tail, head], 1)
        return jnp.tanh(xs.reshape(b, 1, PS19 * d) @ w)
    return f


ARGS19 = (R(B19, T19, D19), R(PS19 * D19, G19, scale=0.3))
C.smap("s.half_patch_shift_straddling.sp4", {"sp": 4}, half_shift_sp, (P(None, "sp"), P()), P(None, "sp"),
       half_shift_patches, ARGS19,
       bugs=[("tail-from-next-device", ["wrong-permutation"]), ("own-tail-as-head", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 20. the MEGABYTE patch shift of 1. written with a cyclic ppermute (the
#     last device's patch wraps round to device 0 and is masked out there)
#     and the pad patch selected by a one-hot over the device index; output
#     the shifted, layer-normalised patch stream (sp4, 1 patch per device
#     boundary, 2 patches per device).
def mb_shift(byt, emb, pad, wg):
    b = byt.shape[0]
    h = emb[byt].reshape(b, -1, PS1 * D1) @ wg
    return ln(jnp.concatenate([jnp.broadcast_to(pad, (b, 1, G1)), h[:, :-1]], 1))


def mb_shift_cyclic(bug):
    def f(byt, emb, pad, wg):
        b = byt.shape[0]
        h = emb[byt].reshape(b, -1, PS1 * D1) @ wg
        cyc = [(i, (i + 1) % 4) for i in range(4)]
        prev = lax.ppermute(h[:, -1:], "sp", cyc)
        first = (jax.nn.one_hot(idx("sp"), 4)[0] if bug != "mask-last-device" else jax.nn.one_hot(idx("sp"), 4)[3])
        if bug == "wrap-kept":
            first = 0.0
        g = jnp.concatenate([first * pad + (1.0 - first) * prev, h[:, :-1]], 1)
        return ln(g)
    return f


C.smap("s.megabyte_shift_cyclic_ppermute_masked.sp4", {"sp": 4}, mb_shift_cyclic, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), mb_shift, ARGS1[:4],
       bugs=[("wrap-kept", ["wrong-permutation"]), ("mask-last-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 21. a backward byte model: the sequence reversed across sp4 (lax.rev of the
#     local block and a ppermute i -> 3 - i), a causal kernel-3 convolution
#     over the reversed bytes (left halo by ppermute), reversed back.
B21, T21, D21 = 2, 32, 6


def backward_conv(x, cw):
    xr = jnp.flip(x, 1)
    xp = jnp.pad(xr, ((0, 0), (2, 0), (0, 0)))
    y = xp[:, :-2] * cw[0] + xp[:, 1:-1] * cw[1] + xp[:, 2:] * cw[2]
    return jnp.flip(jax.nn.silu(y), 1)


def backward_conv_sp(bug):
    def f(x, cw):
        mirror = [(i, 3 - i) for i in range(4)]
        xr = lax.rev(x, (1,))
        if bug != "local-reversal-only":
            xr = lax.ppermute(xr, "sp", mirror)
        halo = lax.ppermute(xr[:, -2:], "sp", left(4) if bug == "halo-wrong-side" else right(4))
        xp = jnp.concatenate([halo, xr], 1)
        y = jax.nn.silu(xp[:, :-2] * cw[0] + xp[:, 1:-1] * cw[1] + xp[:, 2:] * cw[2])
        if bug != "local-reversal-only":
            y = lax.ppermute(y, "sp", mirror)
        return lax.rev(y, (1,))
    return f


ARGS21 = (R(B21, T21, D21), R(3, D21, scale=0.7))
C.smap("s.backward_byte_conv_mirror_permute.sp4", {"sp": 4}, backward_conv_sp, (P(None, "sp"), P()), P(None, "sp"),
       backward_conv, ARGS21,
       bugs=[("local-reversal-only", ["wrong-permutation"]), ("halo-wrong-side", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 22. jax.grad of an n-gram hashed-embedding loss in the hash tables (rows
#     over tp4) and the byte embedding, the sequence over sp2 (check_vma=True):
#     loss = mean square of the embedded bytes against a target.
def ngram_loss(byt, emb, tab2, tab3, tgt):
    return jnp.mean(jnp.square(ngram_embed(byt, emb, tab2, tab3) - tgt))


def ngram_grad(byt, emb, tab2, tab3, tgt):
    return jax.grad(ngram_loss, (1, 2, 3))(byt, emb, tab2, tab3, tgt)


def ngram_grad_sp_tp(bug):
    fwd = ngram_embed_sp_tp(None)

    def f(byt, emb, tab2, tab3, tgt):
        def loss(emb, tab2, tab3):
            l = jnp.sum(jnp.square(fwd(byt, emb, tab2, tab3) - tgt)) / tgt.size
            return l if bug == "loss-not-pmeaned" else pmean(l, "sp")
        return jax.grad(loss, (0, 1, 2))(emb, tab2, tab3)
    return f


ARGS22 = ARGS3 + (R(B3, T3, D3),)
C.smap("s.hashed_ngram_grad_tables_vma.sp2xtp4", {"sp": 2, "tp": 4}, ngram_grad_sp_tp,
       (P(None, "sp"), P(), P("tp"), P("tp"), P(None, "sp")), (P(), P("tp"), P("tp")), ngram_grad, ARGS22,
       bugs=[("loss-not-pmeaned", ["wrong-scale"])], check_vma=True)

# ---------------------------------------------------------------------------
# 23. a hashed bigram embedding with the table rows over tp4, looked up with
#     .at[].get(mode="fill") (rows owned elsewhere read as 0) and squashed by
#     tanh on the owner shard before the psum (every other shard holds 0 and
#     tanh(0) = 0), sequence over sp2 with a 1-byte halo.
def bigram_tanh(byt, tab):
    ext = jnp.pad(byt, ((0, 0), (1, 0)))
    h = (ext[:, 1:] * 131 + ext[:, :-1] * 7919) % M3
    return jnp.tanh(tab[h])


def bigram_tanh_sp_tp(bug):
    def f(byt, tab):
        halo = lax.ppermute(byt[:, -1:], "sp", right(2))
        ext = jnp.concatenate([halo, byt], 1)
        h = (ext[:, 1:] * 131 + ext[:, :-1] * 7919) % M3
        ml = tab.shape[0]
        r = h - idx("tp") * ml
        if bug == "unmasked-clip":
            row = tab[jnp.clip(r, 0, ml - 1)]
        else:
            row = tab.at[jnp.where((r >= 0) & (r < ml), r, ml)].get(mode="fill", fill_value=0.0)
        y = jnp.tanh(row)
        return psum(y, "sp" if bug == "psum-over-sp" else "tp")
    return f


C.smap("s.hashed_bigram_fill_lookup_tanh_owner.sp2xtp4", {"sp": 2, "tp": 4}, bigram_tanh_sp_tp,
       (P(None, "sp"), P("tp")), P(None, "sp"), bigram_tanh, (ARGS3[0], R(M3, D3)),
       bugs=[("unmasked-clip", ["wrong-offset"]), ("psum-over-sp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 24. patch statistics on sp2 x tp4 with the byte features over tp: the LM
#     logits replicated over tp, so the mean entropy is a psum over
#     (sp, tp) divided by the tp size as well; patch ids from the mean
#     threshold of 4. with the per-device counts all_gather'd over sp and
#     summed; pooled features reduce-scattered over sp on the patch axis,
#     then all_gather'd back.
B24, T24, V24, D24 = 2, 16, 8, 8


def patch_stats(lg, x):
    e = entropy(lg)
    flag = (e > e.mean(1, keepdims=True)) | (jnp.arange(lg.shape[1]) == 0)[None, :]
    pid = jnp.cumsum(flag.astype(jnp.int32), 1) - 1
    oh = jax.nn.one_hot(pid, T24, dtype=x.dtype)
    return jnp.einsum("btp,btd->bpd", oh, x) / jnp.maximum(oh.sum(1)[..., None], 1.0), e.mean()


def patch_stats_sp_tp(bug):
    def f(lg, x):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        tsum = psum(e.sum(1, keepdims=True), ("sp", "tp"))
        thr = tsum / (2 * tl * (1 if bug == "threshold-not-divided-by-tp" else 4))
        flag = (e > thr) | ((me * tl + jnp.arange(tl)) == 0)[None, :]
        loc = jnp.cumsum(flag.astype(jnp.int32), 1)
        tot = lax.all_gather(loc[:, -1], "sp")  # (2, b)
        pid = loc - 1 + jnp.where(me == 1, tot[0], 0)[:, None]
        oh = jax.nn.one_hot(pid, T24, dtype=x.dtype)
        s = lax.psum_scatter(jnp.einsum("btp,btd->bpd", oh, x), "sp", scatter_dimension=1, tiled=True)
        s = lax.all_gather(s, "sp", axis=1, tiled=True)
        c = lax.all_gather(oh.sum(1), "tp" if bug == "counts-gathered-over-tp" else "sp").sum(0)[..., None]
        em = psum(e.sum(), ("sp", "tp")) / (4 * e.size * 2)
        return s / jnp.maximum(c, 1.0), em
    return f


C.smap("s.patch_stats_psum_over_sp_tp_scaled.sp2xtp4", {"sp": 2, "tp": 4}, patch_stats_sp_tp,
       (P(None, "sp"), P(None, "sp", "tp")), (P(None, None, "tp"), P()), patch_stats,
       (R(B24, T24, V24, scale=1.5), R(B24, T24, D24)),
       bugs=[("threshold-not-divided-by-tp", ["wrong-scale"]), ("counts-gathered-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 25. the global model's patch MLP in bf16 end to end (bf16 embeddings,
#     column-parallel w1, GELU, row-parallel w2, psum over tp in bf16,
#     residual), patches over sp2, tp4.
B25, T25, PS25, V25, D25, F25 = 2, 32, 8, 64, 8, 64


def patch_mlp_bf16(byt, emb, w1, w2):
    b = byt.shape[0]
    pe = emb.astype(jnp.bfloat16)[byt].reshape(b, -1, PS25 * D25)
    h = jax.nn.gelu(pe @ w1.astype(jnp.bfloat16))
    return pe + h @ w2.astype(jnp.bfloat16)


def patch_mlp_bf16_sp_tp(bug):
    def f(byt, emb, w1, w2):
        b = byt.shape[0]
        pe = emb.astype(jnp.bfloat16)[byt].reshape(b, -1, PS25 * D25)
        h = jax.nn.gelu(pe @ w1.astype(jnp.bfloat16))
        y = h @ w2.astype(jnp.bfloat16)
        if bug == "residual-inside-psum":
            return psum(pe + y, "tp")
        return pe + psum(y, "sp" if bug == "psum-over-sp" else "tp")
    return f


ARGS25 = (I(0, V25, B25, T25), R(V25, D25), R(PS25 * D25, F25, scale=0.15), R(F25, PS25 * D25, scale=0.15))
C.smap("s.patch_mlp_bf16_rowparallel.sp2xtp4", {"sp": 2, "tp": 4}, patch_mlp_bf16_sp_tp,
       (P(None, "sp"), P(), P(None, "tp"), P("tp")), P(None, "sp"), patch_mlp_bf16, ARGS25,
       bugs=[("residual-inside-psum", ["wrong-scale"]), ("psum-over-sp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 26. bf16 patch pooling with patches straddling devices on sp8: 48 bytes (6
#     per device), patches of 16 bytes, the per-patch sums in bf16 by a
#     one-hot matmul, psum'd over sp in bf16, divided by 16, a bf16 patch
#     projection.
B26, T26, PS26, D26, G26 = 2, 48, 16, 16, 16
NP26 = T26 // PS26


def bf16_pool(x, w):
    xb = x.astype(jnp.bfloat16)
    pm = xb.reshape(x.shape[0], NP26, PS26, D26).sum(2) / PS26
    return pm @ w.astype(jnp.bfloat16)


def bf16_pool_sp(bug):
    def f(x, w):
        tl = x.shape[1]
        xb = x.astype(jnp.bfloat16)
        pos = idx("sp") * tl + jnp.arange(tl)
        oh = jax.nn.one_hot(pos // PS26, NP26, dtype=jnp.bfloat16)
        s = jnp.einsum("tp,btd->bpd", oh, xb)
        if bug == "divided-by-local-length":
            pm = psum(s / tl, "sp")
        else:
            pm = psum(s, "sp") / PS26
        if bug == "pmean-instead-of-psum":
            pm = pmean(s, "sp") / PS26
        return pm @ w.astype(jnp.bfloat16)
    return f


ARGS26 = (R(B26, T26, D26, scale=2.0), R(D26, G26, scale=0.5))
C.smap("s.bf16_patch_pool_straddling.sp8", {"sp": 8}, bf16_pool_sp, (P(None, "sp"), P()), P(), bf16_pool, ARGS26,
       bugs=[("divided-by-local-length", ["wrong-scale"]), ("pmean-instead-of-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 27. a wide bf16 row-parallel projection of the patch stream over tp8
#     (hidden 256, bf16 psum of 8 partial sums) followed by an f32 RMS norm.
B27, N27, G27, F27 = 2, 8, 32, 256


def wide_bf16(g, w1, w2):
    h = jax.nn.relu(g.astype(jnp.bfloat16) @ w1.astype(jnp.bfloat16))
    y = (h @ w2.astype(jnp.bfloat16)).astype(jnp.float32)
    return y * lax.rsqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6)


def wide_bf16_tp(bug):
    def f(g, w1, w2):
        h = jax.nn.relu(g.astype(jnp.bfloat16) @ w1.astype(jnp.bfloat16))
        y = h @ w2.astype(jnp.bfloat16)
        y = (y if bug == "norm-before-psum" else psum(y, "tp")).astype(jnp.float32)
        y = y * lax.rsqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6)
        return psum(y, "tp") if bug == "norm-before-psum" else y
    return f


ARGS27 = (R(B27, N27, G27), R(G27, F27, scale=0.2), R(F27, G27, scale=0.1))
C.smap("s.wide_bf16_rowparallel_rmsnorm.tp8", {"tp": 8}, wide_bf16_tp, (P(), P(None, "tp"), P("tp")), P(),
       wide_bf16, ARGS27, bugs=[("norm-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 28. greedy patching with a maximum patch length (a new patch where the
#     entropy exceeds the row's mean + half the way to its max, or the
#     running patch reaches K = 3 bytes): a sequential scan whose carry (the run length) crosses device
#     boundaries on sp4. Each device scans its block for every possible
#     incoming run length (0 .. K), the per-device transfer tables are
#     all_gather'd and composed in device order, and the device keeps the
#     flags of its actual incoming run; patch ids by a prefix of the flag
#     counts.
B28, T28, V28, K28 = 4, 64, 8, 3


def greedy_scan(big, t0, run0):
    """big (t,) bools, t0 (t,) bools (the global byte 0); returns flags, last run."""
    def step(run, bt):
        b, z = bt
        new = z | b | (run == K28)
        run = jnp.where(new, 1, run + 1)
        return run, new
    run, fl = lax.scan(step, run0, (big, t0))
    return fl, run


def greedy_patches(lg):
    e = entropy(lg)
    m = e.mean(1, keepdims=True)
    big = e > m + 0.5 * (e.max(1, keepdims=True) - m)
    t0 = jnp.arange(lg.shape[1]) == 0
    fl, _ = jax.vmap(lambda b: greedy_scan(b, t0, jnp.int32(0)))(big)
    return fl.astype(jnp.int32), jnp.cumsum(fl.astype(jnp.int32), 1) - 1


def greedy_patches_sp(bug):
    def f(lg):
        tl, me = lg.shape[1], idx("sp")
        e = entropy(lg)
        m = psum(e.sum(1, keepdims=True), "sp") / (4 * tl)
        big = e > m + 0.5 * (pmax(e.max(1, keepdims=True), "sp") - m)
        t0 = (me * tl + jnp.arange(tl)) == 0
        runs = jnp.arange(K28 + 1, dtype=jnp.int32)
        fl, out = jax.vmap(lambda r: jax.vmap(lambda b: greedy_scan(b, t0, r))(big))(runs)  # (K+1, b, tl), (K+1, b)
        tab = lax.all_gather(out, "sp")  # (4, K+1, b)
        c = jnp.zeros((lg.shape[0],), jnp.int32)
        if bug != "carry-restarted-per-device":
            order = range(3, -1, -1) if bug == "compose-reversed" else range(4)
            for d in order:
                nxt = jnp.take_along_axis(tab[d], c[None, :], 0)[0]
                c = jnp.where(d < me, nxt, c)
        mine = jnp.take_along_axis(fl, c[None, :, None], 0)[0].astype(jnp.int32)
        tot = lax.all_gather(mine.sum(1), "sp")  # (4, b)
        pre = jnp.sum(jnp.where((jnp.arange(4) < me)[:, None], tot, 0), 0)
        return mine, jnp.cumsum(mine, 1) - 1 + pre[:, None]
    return f


C.smap("s.greedy_max_length_patching_transfer_tables.sp4", {"sp": 4}, greedy_patches_sp, (P(None, "sp"),),
       (P(None, "sp"), P(None, "sp")), greedy_patches, (R(B28, T28, V28, scale=1.5),),
       bugs=[("carry-restarted-per-device", ["missing-collective"]), ("compose-reversed", ["wrong-order"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.megabyte_global_model.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 6, P(None, "sp"), mb_global, ARGS1)
C.gspmd("g.hashed_ngram_embedding.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp"), P(), P("tp"), P("tp")),
        P(None, "sp"), ngram_embed, ARGS3)
C.gspmd("g.charformer_gbst.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), gbst, ARGS5)
C.gspmd("g.funnel_pool_upsample.sp4", {"sp": 4}, (P(None, "sp"),) + (P(),) * 4, P(None, "sp"), funnel, ARGS6)
C.gspmd("g.strided_conv_downsample.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"), strided_down,
        ARGS7)
C.gspmd("g.patchify_unpatchify_bf16.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp"), P(None, "tp"), P("tp")),
        P(None, "sp"), patch_unpatch, ARGS12)
C.gspmd("g.blt_sliding_window_bytes.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"), swa_bytes, ARGS13)
C.gspmd("g.megabyte_local_model.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(None, "sp"), P(), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()),
        P(None, "sp"), mb_local, ARGS2)
C.gspmd("g.patches_straddling_devices.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), straddle, ARGS8)
C.gspmd("g.fibonacci_hash_trigram.sp4xtp2", {"sp": 4, "tp": 2}, (P(None, "sp"), P(), P("tp")), P(None, "sp"),
        fib_embed, ARGS15)
C.gspmd("g.transposed_conv_upsample.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), up_tconv, ARGS17)
C.gspmd("g.half_patch_shift_straddling.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), half_shift_patches,
        ARGS19)
C.gspmd("g.backward_byte_conv_flip.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), backward_conv, ARGS21)
C.gspmd("g.hashed_ngram_grad_tables.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp"), P(), P("tp"), P("tp"), P(None, "sp")),
        (P(), P("tp"), P("tp")), ngram_grad, ARGS22)
MESH24 = {"sp": 2, "tp": 4}


def mb_forward_constrained(byt, emb, pad, wg, wq, wk, wv, wup, lemb, lpad, lq, lk, lv, lo, wout):
    """the global model of 1. (patches over sp), its output projected to per-byte context
    and constrained to features over tp, then the local model of 2."""
    m = make_mesh(MESH24)
    g = mb_global(byt, emb, pad, wg, wq, wk, wv)
    g = lax.with_sharding_constraint(g, NamedSharding(m, P(None, "sp")))
    ctx = lax.with_sharding_constraint(g @ wup, NamedSharding(m, P(None, None, "tp")))
    return mb_local(byt, ctx, lemb, lpad, lq, lk, lv, lo, wout)


C.gspmd("g.megabyte_forward_resharded_constraints.sp2xtp4", MESH24, (P(None, "sp"),) + (P(),) * 14, P(None, "sp"),
        mb_forward_constrained,
        ARGS1 + (R(G1, PS1 * D2, scale=0.3), R(V1, D2), R(D2, scale=0.5), R(D2, H2, E2, scale=0.4),
                 R(D2, H2, E2, scale=0.4), R(D2, H2, E2, scale=0.4), R(H2, E2, D2, scale=0.3), R(D2, V2, scale=0.4)))
C.gspmd("g.patch_mlp_bf16.sp2xtp4", {"sp": 2, "tp": 4}, (P(None, "sp"), P(), P(None, "tp"), P("tp")), P(None, "sp"),
        patch_mlp_bf16, ARGS25)
C.gspmd("g.bf16_patch_pool.sp8", {"sp": 8}, (P(None, "sp"), P()), P(), bf16_pool, ARGS26)
C.gspmd("g.wide_bf16_rowparallel.tp8", {"tp": 8}, (P(), P(None, "tp"), P("tp")), P(), wide_bf16, ARGS27)
C.gspmd("g.entropy_patch_mean_pool.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")), P(), entropy_pool, ARGS4)
OPTG = optax.adamw(1e-2, weight_decay=0.05)
SG = OPTG.init(P9)
SSG = state_specs(SG, SPEC9)


def stepg(p, s, byt):
    l, g = jax.value_and_grad(mb_loss)(p, byt)
    u, s = OPTG.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.megabyte_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC9, SSG, P("dp")), (SPEC9, SSG, P()), stepg,
        (P9, SG, ARGS9[2]))
C.finish()
