"""samples/fresh107: a 107th batch of programs as a user writes them, on the theme of vision-language and multimodal models in JAX (CLIP with several captions per image, learnt and clipped logit scales, SigLIP with class-shared positives around ppermute rings, overlapping and strided-conv patch embeddings with halos or an all_to_all to sequence parallelism, HF-style masked_scatter and concatenate-at-offset image-token splicing, Q-Former / Perceiver cross-attention from learnt queries to padded image tokens over a mesh axis, Swin shifted windows, patch merging and relative position bias, padded captioning losses, CoCa and CLIP training steps with jax.grad and optax under dp, dp x tp and fsdp), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. CLIP with K = 2 captions per image (dp4): image-to-text soft targets
    (1/K on each of the image's captions), text-to-image hard labels at the
    owner image j // K, logit scale exp'd and clipped at 100, embeddings
    all_gather'd (tiled), row losses psum'd. Bugs: owner index from the local
    caption index, only the first caption as positive, text-to-image sum
    divided by the number of images.
 2. SigLIP whose positives are wherever class ids agree, dp4: the text chunk
    and its class ids passed to the next device together in a lax.scan.
    Bugs: ids not rotated, ids rotated the other way, divided by the local
    batch.
 3. SegFormer / PVT overlapping patch embedding (7x7 conv, stride 4, pad 3)
    with the height over sp4 and 3-row halos from both neighbours by
    non-cyclic ppermutes, then LayerNorm. Bugs: halos swapped, cyclic halos
    (the border devices get the far end's rows instead of zeros).
 4. HF masked_scatter of projected image features into the text embeddings
    at <image> placeholders (two runs of 3 per row), rows over dp2, sequence
    over sp4: placeholder rank = placeholders on earlier devices (all_gather'd
    counts) + local cumsum - 1. Bugs: no prefix, an inclusive prefix.
 5. attention pooling (4 learnt queries, 2 heads) of 16 image tokens over
    sp4, merged flash-decoding style from all_gather'd partial outputs and
    log-sum-exps. Bugs: a plain mean of the partials, the log-sum-exp without
    the max term.
 6. Swin shifted-window attention (window 4, shift 2) of a 16 x 8 map with
    rows over sp4: the -2 row roll by a cyclic ppermute of the next device's
    first rows, region mask from global shifted rows, reverse roll from the
    previous device. Bugs: rows fetched from the previous device, region ids
    from local rows.
 7. Swin patch merging with the 4C channels over tp4: device k builds
    quadrant k (x0, x1, x2, x3 order) by dynamic indexing, LayerNorm with
    psum'd moments, row-parallel 4C -> 2C reduction psum'd; batch over dp2.
    Bugs: quadrant row / column swapped, LayerNorm with local moments.
 8. a per-caption mean of masked token NLLs with the vocabulary over tp4
    (pmax / psum log-sum-exp, one_hot target at the vocab offset), captions
    over dp2. Bugs: target without the vocab offset, local log-sum-exp.
 9. a CoCa step under FSDP (fsdp4): weights all_gather'd, the device's loss
    share (contrastive over all_gather'd embeddings + captioning CE)
    differentiated w.r.t. the gathered weights, gradients psum_scatter'd,
    optax.adamw on the shards with earlier moments. Bugs: own slice of the
    gradient without reduction, the scattered gradient divided by 4.
10. a CLIP step on dp2 x tp4 with check_vma=True: column-parallel
    projections, norms and logits psum'd over tp, embeddings all_gather'd
    over dp, loss psum'd over dp inside jax.value_and_grad, optax.adam on
    sharded weights and a replicated logit scale. Bugs: norms over the local
    columns, labels without the dp offset.
11. strided-conv patch embedding with the kernel's output channels over tp4,
    all_to_all from channel shards to token shards, position embedding at
    the token offset, LayerNorm. Bugs: positions at offset 0, a LayerNorm of
    the local channel slice before the all_to_all.
12. CLIP zero-shot classification with prompt ensembling (32 classes x 2
    templates over tp4, images over dp2): argmax across devices by pmax and
    pmin of the global index among the devices holding the max; accuracy
    pmean'd. Bugs: argmax without the class offset, mean of unnormalised
    prompt embeddings.
13. Swin window attention with a relative position bias table, heads over
    tp4 (table columns, qkv and output projections by head), windows over
    dp2. Bugs: relative index transposed, output projection pmean'd.
14. Q-Former cross-attention from 8 learnt queries to padded image tokens
    (tokens over sp2, heads over tp4, bf16 keys / values with f32
    accumulation), key mask at global positions all_gather'd with the keys,
    output projection reduced by psum_scatter over the queries, bias added,
    all_gather'd over tp. Bugs: mask from local positions, bias added before
    the psum_scatter.
15. a 2-layer Perceiver resampler as a lax.scan over stacked weights
    (latents attend to [image tokens; latents]), FFN hidden units over tp4,
    batch over dp2. Bugs: FFN output not reduced, reduced over dp.
16. ViT patchify of a replicated 16 x 32 image: each sp4 device
    dynamic_slices its patch row, reshapes / transposes (ph, pw, c), embeds,
    adds its tokens' positions. Bugs: patches flattened (pw, ph, c),
    position offset counted in pixel rows.
17. a LLaVA prompt [3 system | 5 image | 8 text tokens] as one 16-token
    sequence over sp4 by concatenation and a dynamic_slice at the device
    offset, text all_gather'd over sp. Bugs: the local text block tiled,
    the offset shifted by one.
18. the SigLIP loss of 2. with an unrolled loop fetching chunk me + k
    directly by a ppermute of shift k. Bugs: class ids fetched from me - k,
    the own chunk skipped.
19. a symmetric CLIP loss from all_gather'd logit rows (untiled then merged),
    the whole loss evaluated redundantly on every device (dp4). Bugs: the
    gathered rows interleaved (transpose before the merge), the logit scale
    dividing.
GSPMD pairs (jax.jit with in/out shardings, correct only): 20. the
two-caption CLIP loss of 1. (dp4); 21. the shifted-window attention of 6.
(rows over sp4); 22. the overlapping patch embedding of 3. (height over
sp4); 23. the masked_scatter splice of 4. (dp2 x sp4); 24. the CoCa adamw
step of 9. (weights, moments and batch over fsdp4); 25. the zero-shot
classifier of 12. (dp2 x tp4); 26. the scanned Perceiver resampler of 15.
(dp2 x tp4); 27. the padded Q-Former cross-attention of 14. (sp2 x tp4);
28. the Swin patch merging of 7. (batch over dp2, output channels over tp4).
Numerics: every correct pair agrees with its baseline at rounding level (f32,
at most ~1.4e-6); every bug variant differs clearly (see "numerics"). A
first draft of 16. used 16 x 16 images, where a device's patch row holds as
many tokens as pixel rows, so the pixel-row offset bug was no bug; the images
are now 16 x 32.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh107.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh107.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh107.py"
C = Corpus("samples/fresh107", SCRIPT, "samples/gen/run_fresh107.sh", sys.argv[1:])
rng, R, I = seeded(107107)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
f32 = jnp.float32


def l2n(x, axis=-1):
    return x * lax.rsqrt(jnp.sum(x * x, axis, keepdims=True) + 1e-6)


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = jnp.square(x - mu).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


# ---------------------------------------------------------------------------
# 1. CLIP with K = 2 captions per image (COCO style), images and captions
#    both over dp4: caption j belongs to image j // K. Image-to-text is a
#    soft target (1/K on each of the image's captions), text-to-image a hard
#    label at the owner image; the learnt logit scale is exp'd and clipped
#    at 100. Embeddings all_gather'd (tiled), row losses psum'd.
K1, B1, DI1, DT1, E1 = 2, 8, 12, 10, 8


def multicap_clip(img, txt, wi, wt, ls):
    zi, zt = l2n(img @ wi), l2n(txt @ wt)
    s = jnp.minimum(jnp.exp(ls), 100.0)
    lg = s * zi @ zt.T
    tgt = (jnp.arange(zt.shape[0])[None, :] // K1 == jnp.arange(zi.shape[0])[:, None]).astype(f32) / K1
    i2t = -jnp.mean(jnp.sum(tgt * jax.nn.log_softmax(lg, 1), 1))
    t2i = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg.T, jnp.arange(zt.shape[0]) // K1))
    return 0.5 * (i2t + t2i)


def multicap_dp(bug):
    def f(img, txt, wi, wt, ls):
        zi, zt = l2n(img @ wi), l2n(txt @ wt)
        bi, bt = zi.shape[0], zt.shape[0]
        me = idx("dp")
        ZI = lax.all_gather(zi, "dp", tiled=True)
        ZT = lax.all_gather(zt, "dp", tiled=True)
        s = jnp.minimum(jnp.exp(ls), 100.0)
        rows = me * bi + jnp.arange(bi)
        cols = jnp.arange(ZT.shape[0])
        if bug == "single-positive-caption":
            tgt = (cols[None, :] == K1 * rows[:, None]).astype(f32)
        else:
            tgt = (cols[None, :] // K1 == rows[:, None]).astype(f32) / K1
        li = -jnp.sum(tgt * jax.nn.log_softmax(s * zi @ ZT.T, 1))
        tl = jnp.arange(bt) if bug == "caption-owner-local" else me * bt + jnp.arange(bt)
        lt = jnp.sum(optax.softmax_cross_entropy_with_integer_labels(s * zt @ ZI.T, tl // K1))
        nt = ZI.shape[0] if bug == "t2i-over-image-count" else ZT.shape[0]
        return 0.5 * (psum(li, "dp") / ZI.shape[0] + psum(lt, "dp") / nt)
    return f


ARGS1 = (R(B1, DI1), R(K1 * B1, DT1), R(DI1, E1, scale=0.4), R(DT1, E1, scale=0.4), jnp.float32(np.log(1 / 0.07)))
C.smap("s.clip_two_captions_per_image.dp4", {"dp": 4}, multicap_dp, (P("dp"), P("dp"), P(), P(), P()), P(),
       multicap_clip, ARGS1,
       bugs=[("caption-owner-local", ["wrong-offset"]), ("single-positive-caption", ["wrong-value"]),
             ("t2i-over-image-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. SigLIP where captions can share a class (positives wherever the class
#    ids agree, not only on the diagonal), batch over dp4: the text chunk and
#    its class ids travel together around the ring in a lax.scan (send to
#    the next device), the sigmoid loss of every block summed, psum'd, / B.
B2, D2 = 8, 8


def siglip_classes(zi, zt, ci, ct, t, b):
    zi, zt = l2n(zi), l2n(zt)
    lg = zi @ zt.T * jnp.exp(t) + b
    lab = 2.0 * (ci[:, None] == ct[None, :]) - 1.0
    return -jnp.sum(jax.nn.log_sigmoid(lab * lg)) / zi.shape[0]


def siglip_ring(bug):
    n = 4
    fwd = [(i, (i + 1) % n) for i in range(n)]
    bwd = [(i, (i - 1) % n) for i in range(n)]

    def f(zi, zt, ci, ct, t, b):
        zi, zt = l2n(zi), l2n(zt)

        def step(carry, _):
            z, c, acc = carry
            lg = zi @ z.T * jnp.exp(t) + b
            lab = 2.0 * (ci[:, None] == c[None, :]) - 1.0
            acc = acc - jnp.sum(jax.nn.log_sigmoid(lab * lg))
            z = lax.ppermute(z, "dp", fwd)
            if bug != "class-ids-not-rotated":
                c = lax.ppermute(c, "dp", bwd if bug == "class-ids-rotated-backwards" else fwd)
            return (z, c, acc), None
        (_, _, acc), _ = lax.scan(step, (zt, ct, jnp.zeros((), f32)), None, length=n)
        tot = psum(acc, "dp")
        return tot / (zi.shape[0] if bug == "divided-by-local-batch" else zi.shape[0] * n)
    return f


C.smap("s.siglip_shared_class_positives_scan_ring.dp4", {"dp": 4}, siglip_ring,
       (P("dp"), P("dp"), P("dp"), P("dp"), P(), P()), P(), siglip_classes,
       (R(B2, D2), R(B2, D2), I(0, 3, B2), I(0, 3, B2), jnp.float32(np.log(10.0)), jnp.float32(-10.0)),
       bugs=[("class-ids-not-rotated", ["missing-collective"]), ("class-ids-rotated-backwards", ["wrong-permutation"]),
             ("divided-by-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. SegFormer / PVT overlapping patch embedding: a 7x7 conv with stride 4
#    and padding 3 of an NHWC image whose height is over sp4 (4 rows a
#    device, one output row each), 3-row halos from both neighbours by
#    non-cyclic ppermutes (zeros at the image border), then LayerNorm.
H3, W3, C3, O3 = 16, 8, 3, 8
DN = ("NHWC", "HWIO", "NHWC")


def overlap_embed(x, k, g, b):
    y = lax.conv_general_dilated(x, k, (4, 4), ((3, 3), (3, 3)), dimension_numbers=DN)
    return layer_norm(y, g, b)


def overlap_sp(bug):
    n = 4
    down = [(i, i + 1) for i in range(n - 1)]
    up = [(i + 1, i) for i in range(n - 1)]
    if bug == "cyclic-halos":
        down, up = down + [(n - 1, 0)], up + [(0, n - 1)]

    def f(x, k, g, b):
        from_above = lax.ppermute(x[:, -3:], "sp", down)  # last rows of the device above
        from_below = lax.ppermute(x[:, :3], "sp", up)
        if bug == "halos-swapped":
            from_above, from_below = from_below, from_above
        xe = jnp.concatenate([from_above, x, from_below], 1)
        y = lax.conv_general_dilated(xe, k, (4, 4), ((0, 0), (3, 3)), dimension_numbers=DN)
        return layer_norm(y, g, b)
    return f


C.smap("s.overlap_patch_embed_halo_conv.sp4", {"sp": 4}, overlap_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), overlap_embed,
       (R(2, H3, W3, C3), R(7, 7, C3, O3, scale=0.1), 1.0 + R(O3, scale=0.1), R(O3, scale=0.1)),
       bugs=[("halos-swapped", ["wrong-permutation"]), ("cyclic-halos", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 4. HF-style masked_scatter of projected image features into the text
#    embeddings at the <image> placeholder tokens (id 0; 6 per row, in two
#    runs of 3 at arbitrary places), rows over dp2 and the sequence over sp4:
#    the k-th placeholder of a row gets the k-th image feature, k counted as
#    the number of placeholders before it on earlier devices (all_gather'd
#    counts, summed below the device's index) plus the local cumsum - 1.
B4, T4, NI4, DV4, D4, V4 = 4, 16, 6, 6, 8, 20


def splice_ids(b):
    ids = rng.integers(1, V4, (b, T4)).astype(np.int32)
    for r in range(b):
        s1 = rng.integers(0, 5)
        s2 = rng.integers(s1 + 4, T4 - 2)
        ids[r, s1:s1 + 3] = 0
        ids[r, s2:s2 + 3] = 0
    return ids


def masked_scatter(ids, feats, wp, emb):
    img = jax.nn.gelu(feats @ wp)
    m = ids == 0
    k = jnp.cumsum(m, 1) - 1
    got = jnp.take_along_axis(img, jnp.clip(k, 0, NI4 - 1)[..., None], 1)
    return jnp.where(m[..., None], got, emb[ids])


def masked_scatter_sp(bug):
    def f(ids, feats, wp, emb):
        img = jax.nn.gelu(feats @ wp)
        m = ids == 0
        cnt = jnp.sum(m, 1)
        allc = lax.all_gather(cnt, "sp", axis=1)  # (b, n)
        me = idx("sp")
        below = jnp.arange(allc.shape[1]) <= me if bug == "inclusive-prefix" else jnp.arange(allc.shape[1]) < me
        pre = jnp.sum(jnp.where(below[None, :], allc, 0), 1)
        if bug == "no-prefix":
            pre = 0 * pre
        k = pre[:, None] + jnp.cumsum(m, 1) - 1
        got = jnp.take_along_axis(img, jnp.clip(k, 0, NI4 - 1)[..., None], 1)
        return jnp.where(m[..., None], got, emb[ids])
    return f


C.smap("s.masked_scatter_image_placeholders.dp2xsp4", {"dp": 2, "sp": 4}, masked_scatter_sp,
       (P("dp", "sp"), P("dp"), P(), P()), P("dp", "sp"), masked_scatter,
       (splice_ids(B4), R(B4, NI4, DV4), R(DV4, D4, scale=0.4), R(V4, D4)),
       bugs=[("no-prefix", ["wrong-offset"]), ("inclusive-prefix", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. attention pooling of image tokens (16 over sp4) by 4 learnt queries with
#    2 heads: every device attends to its own tokens and returns its partial
#    output and log-sum-exp; the partials are all_gather'd and merged with
#    softmax weights of the log-sum-exps (as flash-decoding combines splits),
#    then the output projection.
NQ5, H5, E5, N5, D5 = 4, 2, 4, 16, 8


def attn_pool(x, q, wk, wv, wo):
    k = jnp.einsum("bnd,dhe->bnhe", x, wk)
    v = jnp.einsum("bnd,dhe->bnhe", x, wv)
    s = jnp.einsum("qhe,bnhe->bhqn", q, k) / np.sqrt(E5)
    o = jnp.einsum("bhqn,bnhe->bqhe", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhe,hed->bqd", o, wo)


def attn_pool_sp(bug):
    def f(x, q, wk, wv, wo):
        k = jnp.einsum("bnd,dhe->bnhe", x, wk)
        v = jnp.einsum("bnd,dhe->bnhe", x, wv)
        s = jnp.einsum("qhe,bnhe->bhqn", q, k) / np.sqrt(E5)
        m = jnp.max(s, -1, keepdims=True)
        p = jnp.exp(s - m)
        den = jnp.sum(p, -1)
        lse = jnp.log(den) if bug == "lse-without-max" else jnp.log(den) + m[..., 0]
        o = jnp.einsum("bhqn,bnhe->bhqe", p / den[..., None], v)
        O = lax.all_gather(o, "sp")       # (n, b, h, q, e)
        L = lax.all_gather(lse, "sp")     # (n, b, h, q)
        w = jnp.full(L.shape, 1.0 / L.shape[0]) if bug == "plain-mean-of-splits" else jax.nn.softmax(L, 0)
        out = jnp.sum(w[..., None] * O, 0)
        return jnp.einsum("bhqe,hed->bqd", out, wo)
    return f


C.smap("s.attn_pool_lse_merge_of_splits.sp4", {"sp": 4}, attn_pool_sp, (P(None, "sp"), P(), P(), P(), P()), P(),
       attn_pool, (R(2, N5, D5), R(NQ5, H5, E5), R(D5, H5, E5, scale=0.6), R(D5, H5, E5, scale=0.5),
                   R(H5, E5, D5, scale=0.5)),
       bugs=[("plain-mean-of-splits", ["wrong-value"]), ("lse-without-max", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 6. Swin shifted-window attention (window 4, shift 2) of a 16 x 8 map whose
#    rows are over sp4 (one window row a device): the cyclic shift by -2 rows
#    takes the next device's first 2 rows (ppermute, cyclic), the columns roll
#    locally; the Swin region mask comes from the global shifted row; after
#    attention the reverse shift takes the previous device's last 2 rows.
H6, W6, C6, WS, SH = 16, 8, 8, 4, 2


def regions(n, ws, sh):
    r = np.zeros(n, np.int32)
    r[n - ws:n - sh] = 1
    r[n - sh:] = 2
    return r


def win_attn(xs, rid, wqkv, wo):
    # xs: (b, hh, W, c) with hh = WS rows; windows of WS x WS
    b, hh, w, c = xs.shape
    t = xs.reshape(b, hh, w // WS, WS, c).transpose(0, 2, 1, 3, 4).reshape(b, w // WS, WS * WS, c)
    r = rid.reshape(hh, w // WS, WS).transpose(1, 0, 2).reshape(w // WS, WS * WS)
    q, k, v = jnp.split(t @ wqkv, 3, -1)
    s = jnp.einsum("bwic,bwjc->bwij", q, k) / np.sqrt(c)
    s = jnp.where((r[:, :, None] == r[:, None, :])[None], s, -1e9)
    o = jnp.einsum("bwij,bwjc->bwic", jax.nn.softmax(s, -1), v) @ wo
    return o.reshape(b, w // WS, hh, WS, c).transpose(0, 2, 1, 3, 4).reshape(b, hh, w, c)


def shifted_swin(x, wqkv, wo):
    xs = jnp.roll(x, (-SH, -SH), (1, 2))
    rid = regions(H6, WS, SH)[:, None] * 3 + regions(W6, WS, SH)[None, :]
    outs = [win_attn(xs[:, i:i + WS], jnp.asarray(rid[i:i + WS]), wqkv, wo) for i in range(0, H6, WS)]
    return jnp.roll(jnp.concatenate(outs, 1), (SH, SH), (1, 2))


def shifted_swin_sp(bug):
    n = 4
    from_next = [((i + 1) % n, i) for i in range(n)]
    from_prev = [(i, (i + 1) % n) for i in range(n)]

    def f(x, wqkv, wo):
        hh = x.shape[1]
        got = lax.ppermute(x[:, :SH], "sp", from_prev if bug == "shift-rows-from-previous" else from_next)
        xs = jnp.roll(jnp.concatenate([x[:, SH:], got], 1), -SH, 2)
        rows = jnp.arange(hh) if bug == "region-from-local-rows" else idx("sp") * hh + jnp.arange(hh)
        rh = jnp.where(rows >= H6 - SH, 2, jnp.where(rows >= H6 - WS, 1, 0))
        rid = rh[:, None] * 3 + jnp.asarray(regions(W6, WS, SH))[None, :]
        o = win_attn(xs, rid, wqkv, wo)
        back = lax.ppermute(o[:, -SH:], "sp", from_prev)
        return jnp.roll(jnp.concatenate([back, o[:, :-SH]], 1), SH, 2)
    return f


C.smap("s.swin_shifted_window_ppermute_roll.sp4", {"sp": 4}, shifted_swin_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), shifted_swin, (R(2, H6, W6, C6), R(C6, 3 * C6, scale=0.4), R(C6, C6, scale=0.4)),
       bugs=[("shift-rows-from-previous", ["wrong-permutation"]), ("region-from-local-rows", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. Swin patch merging with the 4C merged channels over tp4: device k builds
#    quadrant k of (x0, x1, x2, x3) = (x[0::2, 0::2], x[1::2, 0::2],
#    x[0::2, 1::2], x[1::2, 1::2]) by a dynamic index into a reshaped view,
#    LayerNorm over 4C with psum'd moments (gain / bias over tp), the 4C -> 2C
#    reduction row-parallel with a psum; the batch over dp2.
C7 = 4


def patch_merge(x, g, b, w):
    x0, x1, x2, x3 = x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]
    return layer_norm(jnp.concatenate([x0, x1, x2, x3], -1), g, b) @ w


def patch_merge_tp(bug):
    def f(x, g, b, w):
        k = idx("tp")
        r, c = (k // 2, k % 2) if bug == "quadrant-row-col-swapped" else (k % 2, k // 2)
        bb, h, wd, ch = x.shape
        v = x.reshape(bb, h // 2, 2, wd // 2, 2, ch)
        v = lax.dynamic_index_in_dim(v, r, 2, keepdims=False)
        q = lax.dynamic_index_in_dim(v, c, 3, keepdims=False)  # (b, h/2, w/2, ch)
        n = 4 * ch
        if bug == "ln-local-moments":
            mu = q.mean(-1, keepdims=True)
            var = jnp.square(q - mu).mean(-1, keepdims=True)
        else:
            mu = psum(q.sum(-1, keepdims=True), "tp") / n
            var = psum(jnp.square(q - mu).sum(-1, keepdims=True), "tp") / n
        y = (q - mu) / jnp.sqrt(var + 1e-5) * g + b
        return psum(y @ w, "tp")
    return f


C.smap("s.swin_patch_merge_quadrant_per_tp_rank.dp2xtp4", {"dp": 2, "tp": 4}, patch_merge_tp,
       (P("dp"), P("tp"), P("tp"), P("tp")), P("dp"), patch_merge,
       (R(4, 8, 8, C7), 1.0 + R(4 * C7, scale=0.2), R(4 * C7, scale=0.2), R(4 * C7, 2 * C7, scale=0.3)),
       bugs=[("quadrant-row-col-swapped", ["wrong-offset"]), ("ln-local-moments", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. captioning loss with padded captions, the LM head's vocabulary over tp4
#    and captions over dp2: a per-caption mean of the masked token NLL
#    (caption lengths given), then the mean over captions. The log-sum-exp
#    by pmax / psum over tp, the target logit picked at the vocab offset.
B8, T8, D8, V8 = 4, 6, 8, 32


def caption_loss(h, w, labels, lens):
    lg = h @ w
    nll = optax.softmax_cross_entropy_with_integer_labels(lg, labels)
    m = (jnp.arange(h.shape[1])[None, :] < lens[:, None]).astype(f32)
    return jnp.mean(jnp.sum(nll * m, 1) / lens)


def caption_vp(bug):
    def f(h, w, labels, lens):
        lg = h @ w
        vl = lg.shape[-1]
        mx = lax.stop_gradient(jnp.max(lg, -1, keepdims=True))
        if bug != "lse-local-vocab":
            mx = pmax(mx, "tp")
        se = jnp.sum(jnp.exp(lg - mx), -1)
        lse = jnp.log(se if bug == "lse-local-vocab" else psum(se, "tp")) + mx[..., 0]
        off = 0 if bug == "target-without-vocab-offset" else idx("tp") * vl
        tl = jnp.sum(jax.nn.one_hot(labels - off, vl) * lg, -1)
        nll = lse - psum(tl, "tp")
        m = (jnp.arange(h.shape[1])[None, :] < lens[:, None]).astype(f32)
        per = jnp.sum(nll * m, 1) / lens
        return psum(jnp.sum(per), "dp") / (h.shape[0] * 2)
    return f


C.smap("s.caption_loss_padded_vocab_parallel.dp2xtp4", {"dp": 2, "tp": 4}, caption_vp,
       (P("dp"), P(None, "tp"), P("dp"), P("dp")), P(), caption_loss,
       (R(B8, T8, D8), R(D8, V8, scale=0.5), I(0, V8, B8, T8), np.array([6, 3, 1, 4], np.float32)),
       bugs=[("target-without-vocab-offset", ["wrong-offset"]), ("lse-local-vocab", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. a CoCa training step under FSDP (fsdp4): image / text projections and
#    the caption head stored with their first dim over fsdp, all_gather'd for
#    the forward; the device's loss (its rows' share of the symmetric InfoNCE
#    over all_gather'd embeddings + its captions' token CE, both / global
#    counts) differentiated w.r.t. the gathered weights, the weight gradients
#    psum_scatter'd back to shards, optax.adamw on the shards (moments from
#    earlier steps given).
B9, DI9, DT9, E9, T9, V9 = 8, 8, 8, 8, 4, 16


def coca_loss(wi, wt, wc, img, txt, tok, tgt, ls):
    zi, zt = l2n(img @ wi), l2n(txt @ wt)
    lg = jnp.exp(ls) * zi @ zt.T
    lab = jnp.arange(zi.shape[0])
    con = 0.5 * (jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab)) +
                 jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg.T, lab)))
    hcap = jnp.tanh(tok + (img @ wi)[:, None])
    cap = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(hcap @ wc, tgt))
    return con + 0.5 * cap


OPT9 = optax.adamw(1e-2, weight_decay=0.05)


def coca_step(params, state, img, txt, tok, tgt, ls):
    loss, g = jax.value_and_grad(lambda p: coca_loss(p["wi"], p["wt"], p["wc"], img, txt, tok, tgt, ls))(params)
    u, state = OPT9.update(g, state, params)
    return optax.apply_updates(params, u), state, loss


def coca_fsdp(bug):
    def f(params, state, img, txt, tok, tgt, ls):
        n = 4
        full = {k: lax.all_gather(v, "fsdp", tiled=True) for k, v in params.items()}
        me = idx("fsdp")

        def local(p):
            wi, wt, wc = p["wi"], p["wt"], p["wc"]
            zi, zt = l2n(img @ wi), l2n(txt @ wt)
            b = zi.shape[0]
            ZI, ZT = lax.all_gather(zi, "fsdp", tiled=True), lax.all_gather(zt, "fsdp", tiled=True)
            lab = me * b + jnp.arange(b)
            s = jnp.exp(ls)
            con = 0.5 * (jnp.sum(optax.softmax_cross_entropy_with_integer_labels(s * zi @ ZT.T, lab)) +
                         jnp.sum(optax.softmax_cross_entropy_with_integer_labels(s * zt @ ZI.T, lab))) / (b * n)
            hcap = jnp.tanh(tok + (img @ wi)[:, None])
            cap = jnp.sum(optax.softmax_cross_entropy_with_integer_labels(hcap @ wc, tgt)) / (b * n * tok.shape[1])
            return con + 0.5 * cap
        loss, g = jax.value_and_grad(local)(full)
        if bug == "grad-own-slice-no-reduce":
            g = {k: lax.dynamic_slice_in_dim(v, me * params[k].shape[0], params[k].shape[0], 0) for k, v in g.items()}
        else:
            g = {k: lax.psum_scatter(v, "fsdp", scatter_dimension=0, tiled=True) for k, v in g.items()}
        if bug == "grad-scatter-averaged":
            g = {k: v / n for k, v in g.items()}
        u, state = OPT9.update(g, state, params)
        return optax.apply_updates(params, u), state, psum(loss, "fsdp")
    return f


P9 = {"wi": R(DI9, E9, scale=0.4), "wt": R(DT9, E9, scale=0.4), "wc": R(E9, V9, scale=0.4)}
S9 = OPT9.init(P9)
S9 = (S9[0]._replace(count=jnp.int32(3), mu=jax.tree.map(lambda a: 0.05 * R(*a.shape), S9[0].mu),
                     nu=jax.tree.map(lambda a: 0.01 + 0.01 * np.abs(R(*a.shape)), S9[0].nu)),) + tuple(S9[1:])
SPEC9 = {"wi": P("fsdp"), "wt": P("fsdp"), "wc": P("fsdp")}
SS9 = state_specs(S9, SPEC9)
ARGS9 = (P9, S9, R(B9, DI9), R(B9, DT9), R(B9, T9, E9, scale=0.5), I(0, V9, B9, T9), jnp.float32(np.log(10.0)))
C.smap("s.coca_fsdp_gather_scatter_adamw.fsdp4", {"fsdp": 4}, coca_fsdp,
       (SPEC9, SS9, P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp"), P()), (SPEC9, SS9, P()), coca_step, ARGS9,
       bugs=[("grad-own-slice-no-reduce", ["missing-all-reduce"]), ("grad-scatter-averaged", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 10. a CLIP step on dp2 x tp4 with check_vma=True: both projections
#     column-parallel (embedding dim over tp), L2 norms and logits psum'd over
#     tp, embeddings all_gather'd over dp, the loss psum'd over dp inside the
#     differentiated function; jax.grad, then optax.adam on the sharded
#     projections and the replicated logit scale.
B10, DI10, DT10, E10 = 8, 8, 6, 16
OPT10 = optax.adam(5e-2)


def clip_loss10(p, img, txt):
    zi, zt = l2n(img @ p["wi"]), l2n(txt @ p["wt"])
    lg = jnp.exp(p["ls"]) * zi @ zt.T
    lab = jnp.arange(zi.shape[0])
    return 0.5 * (jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab)) +
                  jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg.T, lab)))


def clip_step10(p, s, img, txt):
    loss, g = jax.value_and_grad(clip_loss10)(p, img, txt)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def clip_dptp(bug):
    def f(p, s, img, txt):
        def loss_fn(p):
            ui, ut = img @ p["wi"], txt @ p["wt"]
            if bug == "norm-of-local-columns":
                zi = ui * lax.rsqrt(jnp.sum(ui * ui, -1, keepdims=True) + 1e-6)
                zt = ut * lax.rsqrt(jnp.sum(ut * ut, -1, keepdims=True) + 1e-6)
            else:
                zi = ui * lax.rsqrt(psum(jnp.sum(ui * ui, -1, keepdims=True), "tp") + 1e-6)
                zt = ut * lax.rsqrt(psum(jnp.sum(ut * ut, -1, keepdims=True), "tp") + 1e-6)
            ZT = lax.all_gather(zt, "dp", tiled=True)
            ZI = lax.all_gather(zi, "dp", tiled=True)
            sc = jnp.exp(p["ls"])
            li = sc * psum(zi @ ZT.T, "tp")
            lt = sc * psum(zt @ ZI.T, "tp")
            b = zi.shape[0]
            lab = jnp.arange(b) if bug == "labels-without-dp-offset" else idx("dp") * b + jnp.arange(b)
            tot = jnp.sum(optax.softmax_cross_entropy_with_integer_labels(li, lab)) + \
                jnp.sum(optax.softmax_cross_entropy_with_integer_labels(lt, lab))
            return 0.5 * psum(tot, "dp") / (b * 2)
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return f


P10 = {"wi": R(DI10, E10, scale=0.4), "wt": R(DT10, E10, scale=0.4), "ls": jnp.float32(np.log(5.0))}
S10 = OPT10.init(P10)
S10 = (S10[0]._replace(count=jnp.int32(2), mu=jax.tree.map(lambda a: 0.02 * R(*np.shape(a)), S10[0].mu),
                       nu=jax.tree.map(lambda a: 1e-3 + 1e-3 * np.abs(R(*np.shape(a))), S10[0].nu)),) + tuple(S10[1:])
SPEC10 = {"wi": P(None, "tp"), "wt": P(None, "tp"), "ls": P()}
SS10 = state_specs(S10, SPEC10)
C.smap("s.clip_step_colparallel_proj_check_vma.dp2xtp4", {"dp": 2, "tp": 4}, clip_dptp,
       (SPEC10, SS10, P("dp"), P("dp")), (SPEC10, SS10, P()), clip_step10,
       (P10, S10, R(B10, DI10), R(B10, DT10)), check_vma=True,
       bugs=[("norm-of-local-columns", ["missing-all-reduce"]), ("labels-without-dp-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. strided-conv patch embedding (patch 4) with the embedding dim over tp4
#     (the kernel's output channels sharded), then an all_to_all from
#     channel shards to token shards (sequence parallel), the learnt
#     position embedding sliced at the device's token offset, LayerNorm.
H11, W11, C11, D11 = 16, 16, 3, 16


def patch_embed11(x, k, pos, g, b):
    t = lax.conv_general_dilated(x, k, (4, 4), "VALID", dimension_numbers=DN)
    t = t.reshape(x.shape[0], -1, k.shape[-1]) + pos
    return layer_norm(t, g, b)


def patch_embed_a2a(bug):
    def f(x, k, pos, g, b):
        t = lax.conv_general_dilated(x, k, (4, 4), "VALID", dimension_numbers=DN)
        t = t.reshape(x.shape[0], -1, k.shape[-1])  # (b, N, D/tp)
        if bug == "ln-before-a2a":
            mu = t.mean(-1, keepdims=True)
            t = (t - mu) / jnp.sqrt(jnp.square(t - mu).mean(-1, keepdims=True) + 1e-5)
        t = lax.all_to_all(t, "tp", 1, 2, tiled=True)  # (b, N/tp, D)
        nl = t.shape[1]
        off = 0 if bug == "pos-at-offset-0" else idx("tp") * nl
        t = t + lax.dynamic_slice_in_dim(pos, off, nl, 0)
        return layer_norm(t, g, b)
    return f


C.smap("s.conv_patch_embed_channels_to_tokens_a2a.tp4", {"tp": 4}, patch_embed_a2a,
       (P(), P(None, None, None, "tp"), P(), P(), P()), P(None, "tp"), patch_embed11,
       (R(2, H11, W11, C11), R(4, 4, C11, D11, scale=0.2), R(16, D11, scale=0.5), 1.0 + R(D11, scale=0.1),
        R(D11, scale=0.1)),
       bugs=[("pos-at-offset-0", ["wrong-offset"]), ("ln-before-a2a", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 12. CLIP zero-shot classification: 32 classes with 2 prompt templates each,
#     the class axis over tp4 and the images over dp2: each prompt embedding
#     normalised, averaged over templates, renormalised (the CLIP ensembling
#     recipe); the predicted class by a local max / argmax, pmax, and the
#     smallest global index among the devices holding the maximum (pmin);
#     outputs the predictions and the top-1 accuracy.
NC12, NT12, D12 = 32, 2, 8


def zeroshot(img, prompts, labels):
    zi = l2n(img)
    zc = l2n(jnp.mean(l2n(prompts), 1))
    s = zi @ zc.T
    pred = jnp.argmax(s, 1).astype(jnp.int32)
    return pred, jnp.mean((pred == labels).astype(f32))


def zeroshot_tp(bug):
    def f(img, prompts, labels):
        zi = l2n(img)
        zc = l2n(jnp.mean(prompts if bug == "mean-of-unnormalised-prompts" else l2n(prompts), 1))
        s = zi @ zc.T
        nl = s.shape[1]
        lm = jnp.max(s, 1)
        la = jnp.argmax(s, 1).astype(jnp.int32) + (0 if bug == "argmax-without-class-offset" else idx("tp") * nl)
        gm = pmax(lm, "tp")
        pred = lax.pmin(jnp.where(lm == gm, la, NC12), "tp")
        acc = pmean(jnp.mean((pred == labels).astype(f32)), "dp")
        return pred, acc
    return f


IMG12 = R(8, D12)
PR12 = R(NC12, NT12, D12)
LAB12 = I(0, NC12, 8)
LAB12[:5] = np.asarray(jax.jit(zeroshot)(IMG12, PR12, LAB12)[0])[:5]  # some correct predictions
C.smap("s.clip_zeroshot_prompt_ensemble_argmax.dp2xtp4", {"dp": 2, "tp": 4}, zeroshot_tp,
       (P("dp"), P("tp"), P("dp")), (P("dp"), P()), zeroshot, (IMG12, PR12, LAB12),
       bugs=[("argmax-without-class-offset", ["wrong-offset"]),
             ("mean-of-unnormalised-prompts", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 13. Swin window attention with a relative position bias table
#     ((2W-1)^2 x heads) and the heads over tp4 (the table's head columns
#     and the qkv / output projections sharded by head), windows from a
#     batch over dp2; output projection psum'd over tp.
W13, HH13, E13, DM13 = 4, 4, 4, 16


def rel_index(w):
    c = np.stack(np.meshgrid(np.arange(w), np.arange(w), indexing="ij")).reshape(2, -1)
    r = (c[:, :, None] - c[:, None, :]).transpose(1, 2, 0) + (w - 1)
    return (r[..., 0] * (2 * w - 1) + r[..., 1]).astype(np.int32)


REL13 = rel_index(W13)
REL13T = rel_index(W13).T.copy()


def win_rpb(x, wq, wk, wv, wo, table):
    # x: (nw, W*W, DM)
    q = jnp.einsum("ntd,dhe->nhte", x, wq)
    k = jnp.einsum("ntd,dhe->nhte", x, wk)
    v = jnp.einsum("ntd,dhe->nhte", x, wv)
    bias = table[REL13].transpose(2, 0, 1)  # (h, t, t)
    s = jnp.einsum("nhie,nhje->nhij", q, k) / np.sqrt(E13) + bias
    o = jnp.einsum("nhij,nhje->nhie", jax.nn.softmax(s, -1), v)
    return jnp.einsum("nhie,hed->nid", o, wo)


def win_rpb_tp(bug):
    def f(x, wq, wk, wv, wo, table):
        q = jnp.einsum("ntd,dhe->nhte", x, wq)
        k = jnp.einsum("ntd,dhe->nhte", x, wk)
        v = jnp.einsum("ntd,dhe->nhte", x, wv)
        rel = REL13T if bug == "relative-index-transposed" else REL13
        bias = table[rel].transpose(2, 0, 1)
        s = jnp.einsum("nhie,nhje->nhij", q, k) / np.sqrt(E13) + bias
        o = jnp.einsum("nhij,nhje->nhie", jax.nn.softmax(s, -1), v)
        out = jnp.einsum("nhie,hed->nid", o, wo)
        return pmean(out, "tp") if bug == "out-proj-pmean" else psum(out, "tp")
    return f


C.smap("s.swin_window_rel_pos_bias_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, win_rpb_tp,
       (P("dp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P(None, "tp")), P("dp"), win_rpb,
       (R(4, W13 * W13, DM13), R(DM13, HH13, E13, scale=0.4), R(DM13, HH13, E13, scale=0.4),
        R(DM13, HH13, E13, scale=0.4), R(HH13, E13, DM13, scale=0.4), R((2 * W13 - 1) ** 2, HH13)),
       bugs=[("relative-index-transposed", ["wrong-offset"]), ("out-proj-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. Q-Former cross-attention from 8 learnt queries to padded image tokens
#     (variable-resolution images: the first nvalid of 16 tokens are real),
#     image tokens over sp2 and heads over tp4 (sp2 x tp4): keys / values of
#     the device's tokens in bf16 with f32 accumulation, all_gather'd over sp
#     with the key mask at global token positions; the row-parallel output
#     projection reduced by psum_scatter over the query axis, its bias added
#     to the scattered rows, then all_gather'd over tp.
NQ14, H14, E14, D14, N14 = 8, 4, 4, 16, 16
bf16 = jnp.bfloat16


def qformer_xattn(x, nvalid, q, wk, wv, wo, bo):
    k = jnp.einsum("bnd,dhe->bnhe", x.astype(bf16), wk.astype(bf16), preferred_element_type=f32)
    v = jnp.einsum("bnd,dhe->bnhe", x.astype(bf16), wv.astype(bf16), preferred_element_type=f32)
    s = jnp.einsum("qhe,bnhe->bhqn", q, k) / np.sqrt(E14)
    ok = jnp.arange(x.shape[1])[None, :] < nvalid[:, None]
    s = jnp.where(ok[:, None, None, :], s, -1e9)
    o = jnp.einsum("bhqn,bnhe->bqhe", jax.nn.softmax(s, -1), v)
    return jnp.einsum("bqhe,hed->bqd", o, wo) + bo


def qformer_sptp(bug):
    def f(x, nvalid, q, wk, wv, wo, bo):
        k = jnp.einsum("bnd,dhe->bnhe", x.astype(bf16), wk.astype(bf16), preferred_element_type=f32)
        v = jnp.einsum("bnd,dhe->bnhe", x.astype(bf16), wv.astype(bf16), preferred_element_type=f32)
        nl = x.shape[1]
        pos = jnp.arange(nl) if bug == "mask-local-token-pos" else idx("sp") * nl + jnp.arange(nl)
        ok = lax.all_gather(pos[None, :] < nvalid[:, None], "sp", axis=1, tiled=True)
        K = lax.all_gather(k, "sp", axis=1, tiled=True)
        V = lax.all_gather(v, "sp", axis=1, tiled=True)
        s = jnp.einsum("qhe,bnhe->bhqn", q, K) / np.sqrt(E14)
        s = jnp.where(ok[:, None, None, :], s, -1e9)
        o = jnp.einsum("bhqn,bnhe->bqhe", jax.nn.softmax(s, -1), V)
        part = jnp.einsum("bqhe,hed->bqd", o, wo)
        if bug == "bias-before-scatter":
            part = part + bo
        y = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
        if bug != "bias-before-scatter":
            y = y + bo
        return lax.all_gather(y, "tp", axis=1, tiled=True)
    return f


C.smap("s.qformer_padded_image_tokens_scatter_gather.sp2xtp4", {"sp": 2, "tp": 4}, qformer_sptp,
       (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P(), qformer_xattn,
       (R(3, N14, D14), np.array([16, 5, 11], np.int32), R(NQ14, H14, E14), R(D14, H14, E14, scale=0.4),
        R(D14, H14, E14, scale=0.4), R(H14, E14, D14, scale=0.4), R(D14, scale=0.3)),
       bugs=[("mask-local-token-pos", ["wrong-offset"]), ("bias-before-scatter", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. a 2-layer Perceiver resampler written as a lax.scan over stacked layer
#     weights: latents (replicated per image) attend to [image tokens;
#     latents] (single head, replicated projections), residual, pre-LN GELU
#     FFN with its hidden units over tp4 (column / row parallel, psum), the
#     batch over dp2.
NL15, L15, N15, D15, F15 = 2, 4, 8, 8, 32


def resampler_layer(lat, x, w):
    kv = jnp.concatenate([x, lat], 1)
    q = layer_norm(lat, w["g1"], 0.0) @ w["wq"]
    k, v = kv @ w["wk"], kv @ w["wv"]
    a = jax.nn.softmax(jnp.einsum("bld,bnd->bln", q, k) / np.sqrt(D15), -1)
    return lat + jnp.einsum("bln,bnd->bld", a, v) @ w["wo"]


def resampler(x, lat0, W):
    def body(lat, w):
        lat = resampler_layer(lat, x, w)
        h = jax.nn.gelu(layer_norm(lat, w["g2"], 0.0) @ w["w1"])
        return lat + h @ w["w2"], None
    lat = jnp.broadcast_to(lat0, (x.shape[0],) + lat0.shape)
    return lax.scan(body, lat, W)[0]


def resampler_tp(bug):
    def f(x, lat0, W):
        def body(lat, w):
            lat = resampler_layer(lat, x, w)
            h = jax.nn.gelu(layer_norm(lat, w["g2"], 0.0) @ w["w1"])
            y = h @ w["w2"]
            if bug == "ffn-psum-over-dp":
                y = psum(y, "dp")
            elif bug != "ffn-not-reduced":
                y = psum(y, "tp")
            return lat + y, None
        lat = jnp.broadcast_to(lat0, (x.shape[0],) + lat0.shape)
        return lax.scan(body, lat, W)[0]
    return f


W15 = {"g1": 1.0 + R(NL15, D15, scale=0.1), "wq": R(NL15, D15, D15, scale=0.4), "wk": R(NL15, D15, D15, scale=0.4),
       "wv": R(NL15, D15, D15, scale=0.4), "wo": R(NL15, D15, D15, scale=0.4), "g2": 1.0 + R(NL15, D15, scale=0.1),
       "w1": R(NL15, D15, F15, scale=0.4), "w2": R(NL15, F15, D15, scale=0.3)}
WS15 = {k: P() for k in W15}
WS15.update(w1=P(None, None, "tp"), w2=P(None, "tp"))
C.smap("s.perceiver_resampler_scan_layers_ffn_tp.dp2xtp4", {"dp": 2, "tp": 4}, resampler_tp,
       (P("dp"), P(), WS15), P("dp"), resampler, (R(4, N15, D15), R(L15, D15), W15),
       bugs=[("ffn-not-reduced", ["missing-all-reduce"]), ("ffn-psum-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 16. ViT patchify by reshape / transpose of a replicated image: each sp4
#     device cuts its patch row (a lax.dynamic_slice of 4 pixel rows at its
#     offset), flattens each 4x4x3 patch in (ph, pw, c) order, embeds it and
#     adds the learnt position embedding of its tokens (16 x 32 images, 8
#     tokens a device); tokens over sp.
H16, P16, C16, D16 = 16, 4, 3, 8


def patchify(x):
    b, h, w, c = x.shape
    t = x.reshape(b, h // P16, P16, w // P16, P16, c).transpose(0, 1, 3, 2, 4, 5)
    return t.reshape(b, (h // P16) * (w // P16), P16 * P16 * c)


def vit_embed(x, w, pos):
    return patchify(x) @ w + pos


def vit_embed_sp(bug):
    def f(x, w, pos):
        me = idx("sp")
        rows = x.shape[1] // 4
        xs = lax.dynamic_slice_in_dim(x, me * rows, rows, 1)
        b, h, wd, c = xs.shape
        t = xs.reshape(b, h // P16, P16, wd // P16, P16, c)
        t = t.transpose(0, 1, 3, 4, 2, 5) if bug == "patch-flattened-pw-ph-c" else t.transpose(0, 1, 3, 2, 4, 5)
        t = t.reshape(b, (h // P16) * (wd // P16), P16 * P16 * c)
        nl = t.shape[1]
        off = me * rows if bug == "pos-offset-in-pixel-rows" else me * nl
        return t @ w + lax.dynamic_slice_in_dim(pos, off, nl, 0)
    return f


C.smap("s.vit_patchify_own_patch_row.sp4", {"sp": 4}, vit_embed_sp, (P(), P(), P()), P(None, "sp"), vit_embed,
       (R(2, H16, 2 * H16, C16), R(P16 * P16 * C16, D16, scale=0.2), R(32, D16)),
       bugs=[("patch-flattened-pw-ph-c", ["wrong-layout"]), ("pos-offset-in-pixel-rows", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. a LLaVA prompt [3 system tokens | 5 image tokens | 8 text tokens]
#     laid out as one 16-token sequence over sp4 by concatenation at an
#     offset: the text embeddings arrive over sp4 (2 a device) and are
#     all_gather'd, the projected image tokens are replicated; each device
#     dynamic_slices its 4 positions out of the concatenation.
NS17, NI17, NT17, D17 = 3, 5, 8, 8


def llava_prompt(sys_e, img, wp, txt):
    return jnp.concatenate([sys_e, jax.nn.gelu(img @ wp), txt], 1)


def llava_prompt_sp(bug):
    def f(sys_e, img, wp, txt):
        T = lax.all_gather(txt, "sp", axis=1, tiled=True)
        if bug == "local-text-block":
            T = jnp.tile(txt, (1, 4, 1))
        full = jnp.concatenate([sys_e, jax.nn.gelu(img @ wp), T], 1)
        nl = full.shape[1] // 4
        start = idx("sp") * nl + (1 if bug == "offset-skips-bos" else 0)
        return lax.dynamic_slice_in_dim(full, start, nl, 1)
    return f


C.smap("s.llava_prompt_concat_at_offset.sp4", {"sp": 4}, llava_prompt_sp, (P(), P(), P(), P(None, "sp")),
       P(None, "sp"), llava_prompt, (R(2, NS17, D17), R(2, NI17, 6), R(6, D17, scale=0.4), R(2, NT17, D17)),
       bugs=[("local-text-block", ["missing-collective"]), ("offset-skips-bos", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. the shared-class SigLIP loss of 2. with an unrolled Python loop in
#     which step k fetches the text chunk (and its class ids) of device
#     me + k straight from the original by one ppermute of shift k (no
#     chained hops), the k = 0 chunk the device's own; dp4.
def siglip_direct(bug):
    n = 4

    def f(zi, zt, ci, ct, t, b):
        zi, zt = l2n(zi), l2n(zt)
        acc = jnp.zeros((), f32)
        for kk in range(0 if bug != "own-chunk-skipped" else 1, n):
            if kk == 0:
                z, c = zt, ct
            else:
                z = lax.ppermute(zt, "dp", [((i + kk) % n, i) for i in range(n)])
                sh = -kk if bug == "ids-fetched-from-minus-k" else kk
                c = lax.ppermute(ct, "dp", [((i + sh) % n, i) for i in range(n)])
            lg = jnp.einsum("id,jd->ij", zi, z) * jnp.exp(t) + b
            lab = jnp.where(ci[:, None] == c[None, :], 1.0, -1.0)
            acc = acc + jnp.sum(jax.nn.softplus(-lab * lg))
        return psum(acc, "dp") / (zi.shape[0] * n)
    return f


C.smap("s.siglip_shared_class_direct_shift_fetch.dp4", {"dp": 4}, siglip_direct,
       (P("dp"), P("dp"), P("dp"), P("dp"), P(), P()), P(), siglip_classes,
       (R(B2, D2), R(B2, D2), I(0, 3, B2), I(0, 3, B2), jnp.float32(np.log(10.0)), jnp.float32(-10.0)),
       bugs=[("ids-fetched-from-minus-k", ["wrong-permutation"]), ("own-chunk-skipped", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 19. the plain symmetric CLIP loss with the logit rows (not the
#     embeddings) all_gather'd: each dp4 device computes its images' rows
#     against all texts, the rows are gathered (untiled, then merged), and
#     every device evaluates the whole loss redundantly from the full matrix.
B19, D19, E19 = 8, 8, 8


def clip_plain(img, txt, wi, wt, ls):
    zi, zt = l2n(img @ wi), l2n(txt @ wt)
    lg = jnp.exp(ls) * zi @ zt.T
    lab = jnp.arange(zi.shape[0])
    return 0.5 * (jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab)) +
                  jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg.T, lab)))


def clip_rows_gathered(bug):
    def f(img, txt, wi, wt, ls):
        zi, zt = l2n(img @ wi), l2n(txt @ wt)
        ZT = lax.all_gather(zt, "dp", tiled=True)
        sc = 1.0 / jnp.exp(ls) if bug == "scale-divides" else jnp.exp(ls)
        rows = sc * zi @ ZT.T                       # (b/n, B)
        g = lax.all_gather(rows, "dp")              # (n, b/n, B)
        if bug == "gathered-rows-interleaved":
            lg = g.transpose(1, 0, 2).reshape(-1, g.shape[-1])
        else:
            lg = g.reshape(-1, g.shape[-1])
        lab = jnp.arange(lg.shape[0])
        return 0.5 * (jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab)) +
                      jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg.T, lab)))
    return f


C.smap("s.clip_logit_rows_gathered_full_loss.dp4", {"dp": 4}, clip_rows_gathered,
       (P("dp"), P("dp"), P(), P(), P()), P(), clip_plain,
       (R(B19, 10), R(B19, 12), R(10, E19, scale=0.4), R(12, E19, scale=0.4), jnp.float32(np.log(20.0))),
       bugs=[("gathered-rows-interleaved", ["wrong-layout"]), ("scale-divides", ["wrong-value"])])

# ===========================================================================
# GSPMD pairs
# 20. the two-captions-per-image CLIP loss of 1. under jit, images and
#     captions over dp4, projections replicated.
C.gspmd("g.clip_two_captions_per_image.dp4", {"dp": 4}, (P("dp"), P("dp"), P(), P(), P()), P(),
        multicap_clip, ARGS1)

# 21. the shifted-window Swin attention of 6. with the rows over sp4 (the
#     jnp.roll and the window reshapes left to the partitioner).
C.gspmd("g.swin_shifted_window_rows.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"),
        shifted_swin, (R(2, H6, W6, C6), R(C6, 3 * C6, scale=0.4), R(C6, C6, scale=0.4)))

# 22. the overlapping patch embedding of 3. with the height over sp4.
C.gspmd("g.overlap_patch_embed.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"), overlap_embed,
        (R(2, H3, W3, C3), R(7, 7, C3, O3, scale=0.1), 1.0 + R(O3, scale=0.1), R(O3, scale=0.1)))

# 23. the masked_scatter splice of 4. with rows over dp2 and the sequence
#     over sp4 (the cumsum over a sharded axis left to the partitioner).
C.gspmd("g.masked_scatter_image_placeholders.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp"), P(), P()),
        P("dp", "sp"), masked_scatter, (splice_ids(B4), R(B4, NI4, DV4), R(DV4, D4, scale=0.4), R(V4, D4)))

# 24. the CoCa adamw step of 9. with the weights and moments over fsdp4 and
#     the batch over fsdp4.
C.gspmd("g.coca_adamw_step_fsdp.fsdp4", {"fsdp": 4}, (SPEC9, SS9, P("fsdp"), P("fsdp"), P("fsdp"), P("fsdp"), P()),
        (SPEC9, SS9, P()), coca_step, ARGS9)

# 25. the zero-shot classifier of 12. with classes over tp4, images over dp2.
C.gspmd("g.clip_zeroshot_prompt_ensemble.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("tp"), P("dp")),
        (P("dp"), P()), zeroshot, (IMG12, PR12, LAB12))

# 26. the scanned Perceiver resampler of 15. with the FFN weights over tp4
#     and the batch over dp2.
C.gspmd("g.perceiver_resampler_scan.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), WS15), P("dp"), resampler,
        (R(4, N15, D15), R(L15, D15), W15))

# 27. the padded Q-Former cross-attention of 14. with image tokens over sp2
#     and heads over tp4.
C.gspmd("g.qformer_padded_image_tokens.sp2xtp4", {"sp": 2, "tp": 4},
        (P(None, "sp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P(), qformer_xattn,
        (R(3, N14, D14), np.array([16, 5, 11], np.int32), R(NQ14, H14, E14), R(D14, H14, E14, scale=0.4),
         R(D14, H14, E14, scale=0.4), R(H14, E14, D14, scale=0.4), R(D14, scale=0.3)))

# 28. the Swin patch merging of 7. under jit with the batch over dp2 and the
#     reduction's output channels over tp4.
C.gspmd("g.swin_patch_merge.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P(), P(), P(None, "tp")), P("dp", None, None, "tp"),
        patch_merge, (R(4, 8, 8, C7), 1.0 + R(4 * C7, scale=0.2), R(4 * C7, scale=0.2), R(4 * C7, 2 * C7, scale=0.3)))

C.finish()
