"""samples/fresh75: a 75th batch of programs as a user writes them, on the theme of vision transformers and masked image modelling under sharding in current JAX (patch embedding by a strided conv or by reshape + dot with the image's height sharded, 2-D sincos / rotary position embeddings with the patch grid sharded, MAE random masking by argsort of per-sample noise with the batch or the patches sharded, per-patch normalised reconstruction losses, class and register tokens prepended under sequence parallelism, ViT training steps with optax AdamW and layer-wise lr decay), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Conv patch embedding (lax.conv_general_dilated, stride = patch 4) of
    images with the height sharded over sp4 (one patch row per device),
    each image standardised by its global mean / std (psum'd sums over
    the height). Bugs: per-device mean, the variance divided by the local
    pixel count.
 2. Reshape + dot patch embedding (dp2 x sp4: batch over dp, height over
    sp) plus a fixed 2-D sincos position embedding computed in the body
    for the device's patch rows. Bugs: rows at offset 0, the row offset
    counted in tokens instead of patch rows.
 3. 2-D rotary attention (half of each head rotated by the patch row,
    half by the column) with the patch grid sharded by rows over sp4,
    keys / values all_gather'd after the rotation. Bugs: the row position
    without the device offset, the rotation applied after the gather with
    local positions.
 4. MAE random masking by argsort of per-sample noise (keep / restore
    indices, take_along_axis gathers) with the batch over dp4, and the
    per-patch normalised (norm_pix) reconstruction loss on the masked
    patches, numerator and mask count psum'd. Bugs: the mask count left
    local, the loss not reduced.
 5. The same loss averaged as a pmean of per-device ratios (correct only:
    every sample masks the same number of patches, so the local mask
    counts are all equal).
 6. MAE masking with the patches sharded over sp4: the noise all_gather'd,
    argsort on every device, the kept tokens gathered by a one-hot einsum
    against the local patches and psum_scatter'd over the kept axis, the
    mask and restore indices sliced at the device's patch offset. Bugs:
    one-hot without the patch offset, restore indices sliced at 0.
 7. MAE decoder input and loss with the patches sharded over sp4: the
    replicated latent extended by mask tokens, unshuffled with the local
    restore indices, plus the sharded position embedding, prediction head,
    norm_pix loss on masked patches psum'd. Bugs: the loss as a pmean of
    per-device ratios (the mask counts differ per device here), the restore
    indices shifted by the device offset.
 8. Class + 3 register tokens replicated, patch tokens sharded over sp4:
    prefix queries / keys computed on every device, patch keys / values
    all_gather'd, the class output replicated. Bugs: the prefix keys
    gathered with the patch keys (counted 4 times), the class token
    attending only the local patches.
 9. Class + register tokens prepended on device 0 only (zero pads with a
    key mask elsewhere, the mask all_gather'd with the keys), class output
    from device 0 by a select and psum. Bugs: the pads not masked, the
    class output psum'd without the select.
10. ViT forward (patch embed, class token, learnt positions, one
    pre-LN block, heads over tp, MLP column / row parallel) under dp2 x
    tp4, cross-entropy pmean'd. Bugs: the attention output projection not
    psum'd, the MLP output psum'd over dp instead of tp.
11. ViT training step under dp8: jax.value_and_grad of the local loss,
    gradients pmean'd, optax AdamW with layer-wise lr decay through
    optax.multi_transform (non-zero moments, as after earlier steps).
    Bugs: gradients not reduced, gradients psum'd (8 times too large,
    shown through the existing moments).
12. bf16 patch embedding by reshape + einsum (f32 accumulation) with the
    width sharded over sp4 and a per-image LayerNorm of the tokens needing
    no collective, then mean-pooled tokens psum'd. Bugs: pooled sum divided
    by the local token count, pooled without psum.
13. Class-token attention pooling over patches sharded over sp4 by a
    distributed softmax (the prefix keys replicated, the maximum pmax'd,
    denominator and weighted values psum'd). Bugs: the maximum not
    pmax'd, the weighted values not psum'd.
14. ViT training step under dp2 x tp4 with check_vma=True (heads and MLP
    over tp, the gradients' dp / tp reductions done by the transpose),
    the AdamW LLRD optimizer of 11. on the tp-sharded parameters. Bugs:
    the gradients psum'd over dp again, the loss divided by the local
    batch size.
15. MAE masking with the noise of the global batch replicated and each
    device's rows sliced at its batch offset, vmap'd jnp.take of the kept
    tokens and the mask by a scatter (.at[keep].set). Bug: rows sliced at
    offset 0.
GSPMD pairs (jax.jit with in/out shardings, correct only): 16. conv patch
embedding of 1. (height over sp4); 17. MAE masking + loss of 4. (dp4);
18. MAE masking of 6. (patches over sp4); 19. 2-D rotary attention of 3.
(rows over sp4); 20. ViT forward of 10. (dp2 x tp4, weights over tp);
21. ViT AdamW LLRD training step of 11. (dp8); 22. class / register
prefix attention of 8. (patches over sp4); 23. the ViT training step of
14. (dp2 x tp4); 24. the MAE masking of 15. (dp4).
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh75.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh75.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh75.py"
C = Corpus("samples/fresh75", SCRIPT, "samples/gen/run_fresh75.sh", sys.argv[1:])
rng, R, I = seeded(7575)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
f32 = jnp.float32


def patchify(img, p):
    b, h, w, c = img.shape
    x = img.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // p) * (w // p), p * p * c)


def sincos_1d(pos, d):
    om = 1.0 / 10000.0 ** (jnp.arange(d // 2, dtype=f32) / (d / 2))
    a = pos.astype(f32)[:, None] * om[None]
    return jnp.concatenate([jnp.sin(a), jnp.cos(a)], -1)


def sincos_2d(rows, cols, d):
    gy, gx = jnp.meshgrid(rows, cols, indexing="ij")
    return jnp.concatenate([sincos_1d(gy.ravel(), d // 2), sincos_1d(gx.ravel(), d // 2)], -1)


def norm_pix(t):
    m = t.mean(-1, keepdims=True)
    v = t.var(-1, keepdims=True)
    return (t - m) / jnp.sqrt(v + 1e-6)


# ---------------------------------------------------------------------------
# 1. Conv patch embedding, height over sp4.
B1, H1, W1, C1, PT1, D1 = 2, 16, 16, 3, 4, 8
DN = ("NHWC", "HWIO", "NHWC")


def conv_embed(img, w, b):
    m = img.mean((1, 2, 3), keepdims=True)
    s = img.std((1, 2, 3), keepdims=True)
    x = (img - m) / (s + 1e-6)
    return lax.conv_general_dilated(x, w, (PT1, PT1), "VALID", dimension_numbers=DN) + b


def conv_embed_sp(bug):
    def f(img, w, b):
        n = H1 * W1 * C1
        if bug == "local-mean":
            m = img.mean((1, 2, 3), keepdims=True)
        else:
            m = psum(jnp.sum(img, (1, 2, 3), keepdims=True), "sp") / n
        xc = img - m
        ss = psum(jnp.sum(xc * xc, (1, 2, 3), keepdims=True), "sp")
        var = ss / (n // 4) if bug == "var-local-count" else ss / n
        x = xc / (jnp.sqrt(var) + 1e-6)
        return lax.conv_general_dilated(x, w, (PT1, PT1), "VALID", dimension_numbers=DN) + b
    return f


A1 = (R(B1, H1, W1, C1, scale=2.0) + 0.5, R(PT1, PT1, C1, D1, scale=0.2), R(D1, scale=0.1))
C.smap("s.conv_patch_embed_std_height.sp4", {"sp": 4}, conv_embed_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       conv_embed, A1, bugs=[("local-mean", ["missing-all-reduce"]), ("var-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. Reshape + dot patch embedding with 2-D sincos positions, dp2 x sp4.
B2, H2, W2, C2, PT2, D2 = 4, 16, 8, 3, 4, 16


def patch_dot(img, w, b):
    t = patchify(img, PT2) @ w + b
    return t + sincos_2d(jnp.arange(H2 // PT2), jnp.arange(W2 // PT2), D2)[None]


def patch_dot_sp(bug):
    def f(img, w, b):
        t = patchify(img, PT2) @ w + b                       # (bl, rows_l * cols, D)
        rows_l, cols = img.shape[1] // PT2, W2 // PT2
        if bug == "rows-offset-0":
            r0 = 0
        elif bug == "offset-in-tokens":
            r0 = idx("sp") * t.shape[1]
        else:
            r0 = idx("sp") * rows_l
        return t + sincos_2d(r0 + jnp.arange(rows_l), jnp.arange(cols), D2)[None]
    return f


A2 = (R(B2, H2, W2, C2), R(PT2 * PT2 * C2, D2, scale=0.15), R(D2, scale=0.1))
C.smap("s.patch_dot_sincos2d_rows.dp2xsp4", {"dp": 2, "sp": 4}, patch_dot_sp, (P("dp", "sp"), P(), P()),
       P("dp", "sp"), patch_dot, A2,
       bugs=[("rows-offset-0", ["wrong-offset"]), ("offset-in-tokens", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. 2-D rotary attention, patch grid rows over sp4.
B3, GH3, GW3, D3, NH3 = 2, 4, 4, 16, 2
HD3 = D3 // NH3


def rope1(x, pos):
    half = x.shape[-1] // 2
    fr = 1.0 / (100.0 ** (jnp.arange(half, dtype=f32) / half))
    a = pos.astype(f32)[:, None] * fr                       # (n, half)
    c, s = jnp.cos(a)[:, None], jnp.sin(a)[:, None]       # (n, 1, half)
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * c - x2 * s, x1 * s + x2 * c], -1)


def rope2d(x, rows, cols):
    d = x.shape[-1] // 2
    return jnp.concatenate([rope1(x[..., :d], rows), rope1(x[..., d:], cols)], -1)


def heads(x, w):
    return (x @ w).reshape(x.shape[0], x.shape[1], NH3, HD3)


def rope_attn(x, wq, wk, wv):
    n = x.shape[1]
    rows, cols = jnp.arange(n) // GW3, jnp.arange(n) % GW3
    q, k, v = rope2d(heads(x, wq), rows, cols), rope2d(heads(x, wk), rows, cols), heads(x, wv)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD3)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
    return o.reshape(x.shape[0], n, D3)


def rope_attn_sp(bug):
    def f(x, wq, wk, wv):
        nl = x.shape[1]
        t = jnp.arange(nl)
        off = 0 if bug == "rows-no-offset" else idx("sp") * (nl // GW3)
        rows, cols = off + t // GW3, t % GW3
        q = rope2d(heads(x, wq), rows, cols)
        if bug == "rope-after-gather":
            k = lax.all_gather(heads(x, wk), "sp", axis=1, tiled=True)
            rr = jnp.tile(rows, 4)
            k = rope2d(k, rr, jnp.tile(cols, 4))
        else:
            k = lax.all_gather(rope2d(heads(x, wk), rows, cols), "sp", axis=1, tiled=True)
        v = lax.all_gather(heads(x, wv), "sp", axis=1, tiled=True)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD3)
        o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v)
        return o.reshape(x.shape[0], nl, D3)
    return f


A3 = (R(B3, GH3 * GW3, D3), R(D3, D3, scale=0.4), R(D3, D3, scale=0.4), R(D3, D3, scale=0.4))
C.smap("s.rope2d_attention_grid_rows.sp4", {"sp": 4}, rope_attn_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), rope_attn, A3,
       bugs=[("rows-no-offset", ["wrong-offset"]), ("rope-after-gather", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. MAE masking + norm_pix loss, batch over dp4.
B4, N4, D4, PP4, RATIO = 8, 16, 8, 12, 0.75
K4 = int(N4 * (1 - RATIO))


def mae_mask(x, noise, keep):
    ids_shuffle = jnp.argsort(noise, axis=1)
    ids_restore = jnp.argsort(ids_shuffle, axis=1)
    ids_keep = ids_shuffle[:, :keep]
    xm = jnp.take_along_axis(x, ids_keep[..., None], axis=1)
    mask = jnp.ones(noise.shape, f32).at[:, :keep].set(0.0)
    mask = jnp.take_along_axis(mask, ids_restore, axis=1)
    return xm, mask, ids_restore


def mae_loss_terms(pred, target, mask):
    l = jnp.mean((pred - norm_pix(target)) ** 2, -1)
    return jnp.sum(l * mask), jnp.sum(mask)


def mae_step(x, noise, pred, target):
    xm, mask, ids_restore = mae_mask(x, noise, K4)
    num, den = mae_loss_terms(pred, target, mask)
    return xm, mask, ids_restore, num / den


def mae_step_dp(bug):
    def f(x, noise, pred, target):
        xm, mask, ids_restore = mae_mask(x, noise, K4)
        num, den = mae_loss_terms(pred, target, mask)
        if bug == "loss-not-reduced":
            return xm, mask, ids_restore, num / den
        den = den if bug == "mask-count-local" else psum(den, "dp")
        return xm, mask, ids_restore, psum(num, "dp") / den
    return f


def mae_step_dp_ratio(bug):
    def f(x, noise, pred, target):
        xm, mask, ids_restore = mae_mask(x, noise, K4)
        num, den = mae_loss_terms(pred, target, mask)
        return xm, mask, ids_restore, pmean(num / den, "dp")
    return f


A4 = (R(B4, N4, D4), rng.random((B4, N4)).astype(np.float32), R(B4, N4, PP4, scale=0.7), R(B4, N4, PP4) * 2 + 1)
O4 = (P("dp"), P("dp"), P("dp"), P())
C.smap("s.mae_mask_normpix_loss.dp4", {"dp": 4}, mae_step_dp, (P("dp"),) * 4, O4, mae_step, A4,
       bugs=[("mask-count-local", ["wrong-scale"]), ("loss-not-reduced", ["missing-all-reduce"])])
C.smap("s.mae_loss_pmean_equal_mask_counts.dp4", {"dp": 4}, mae_step_dp_ratio, (P("dp"),) * 4, O4, mae_step, A4)

# ---------------------------------------------------------------------------
# 6. MAE masking with the patches sharded over sp4.
B6, N6, D6 = 2, 32, 8
K6 = 8


def mae_mask6(x, noise):
    return mae_mask(x, noise, K6)


def mae_mask_sp(bug):
    def f(x, noise):
        nl = x.shape[1]
        off = idx("sp") * nl
        noise_all = lax.all_gather(noise, "sp", axis=1, tiled=True)
        ids_shuffle = jnp.argsort(noise_all, axis=1)
        ids_restore = jnp.argsort(ids_shuffle, axis=1)
        keep = ids_shuffle[:, :K6]                                     # (b, K)
        base = 0 if bug == "onehot-no-offset" else off
        sel = (keep[:, :, None] == (base + jnp.arange(nl))[None, None, :]).astype(x.dtype)
        part = jnp.einsum("bkn,bnd->bkd", sel, x)
        xm = lax.psum_scatter(part, "sp", scatter_dimension=1, tiled=True)
        mask = jnp.ones(noise_all.shape, f32).at[:, :K6].set(0.0)
        mask = jnp.take_along_axis(mask, ids_restore, axis=1)
        roff = 0 if bug == "restore-slice-0" else off
        mask_l = lax.dynamic_slice_in_dim(mask, off, nl, axis=1)
        rest_l = lax.dynamic_slice_in_dim(ids_restore, roff, nl, axis=1)
        return xm, mask_l, rest_l
    return f


A6 = (R(B6, N6, D6), rng.random((B6, N6)).astype(np.float32))
C.smap("s.mae_mask_patches_sharded_onehot.sp4", {"sp": 4}, mae_mask_sp, (P(None, "sp"), P(None, "sp")),
       (P(None, "sp"), P(None, "sp"), P(None, "sp")), mae_mask6, A6,
       bugs=[("onehot-no-offset", ["wrong-offset"]), ("restore-slice-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. MAE decoder input + loss, patches over sp4.
B7, N7, K7, DD7, PP7 = 2, 16, 4, 8, 12


def mae_decode(latent, mtok, ids_restore, pos, wp, target, mask):
    b = latent.shape[0]
    x_ = jnp.concatenate([latent, jnp.broadcast_to(mtok, (b, N7 - K7, DD7))], 1)
    x = jnp.take_along_axis(x_, ids_restore[..., None], axis=1) + pos[None]
    pred = x @ wp
    num, den = mae_loss_terms(pred, target, mask)
    return x, num / den


def mae_decode_sp(bug):
    def f(latent, mtok, ids_restore, pos, wp, target, mask):
        b, nl = ids_restore.shape
        x_ = jnp.concatenate([latent, jnp.broadcast_to(mtok, (b, N7 - K7, DD7))], 1)
        ids = ids_restore - idx("sp") * nl if bug == "restore-minus-offset" else ids_restore
        x = jnp.take_along_axis(x_, ids[..., None], axis=1, mode="clip") + pos[None]
        pred = x @ wp
        num, den = mae_loss_terms(pred, target, mask)
        if bug == "pmean-of-ratios":
            return x, pmean(num / den, "sp")
        return x, psum(num, "sp") / psum(den, "sp")
    return f


def mae_inputs7():
    noise = rng.random((B7, N7))
    ids_shuffle = np.argsort(noise, 1)
    ids_restore = np.argsort(ids_shuffle, 1).astype(np.int32)
    mask = np.ones((B7, N7), np.float32)
    mask[:, :K7] = 0
    mask = np.take_along_axis(mask, ids_restore, 1)
    return (R(B7, K7, DD7), R(DD7, scale=0.5), ids_restore, R(N7, DD7, scale=0.3), R(DD7, PP7, scale=0.4),
            R(B7, N7, PP7) + 0.5, mask)


A7 = mae_inputs7()
C.smap("s.mae_decoder_unshuffle_loss.sp4", {"sp": 4}, mae_decode_sp,
       (P(), P(), P(None, "sp"), P("sp"), P(), P(None, "sp"), P(None, "sp")), (P(None, "sp"), P()),
       mae_decode, A7, bugs=[("pmean-of-ratios", ["wrong-reduction"]), ("restore-minus-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. Class + register tokens replicated, patches over sp4.
B8, N8, D8, NP8 = 2, 16, 8, 4          # NP8 prefix tokens: class + 3 registers


def attend(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)


def prefix_attn(prefix, x, wq, wk, wv):
    t = jnp.concatenate([jnp.broadcast_to(prefix, (x.shape[0], NP8, D8)), x], 1)
    o = attend(t @ wq, t @ wk, t @ wv)
    return o[:, 0], o[:, NP8:]


def prefix_attn_sp(bug):
    def f(prefix, x, wq, wk, wv):
        pre = jnp.broadcast_to(prefix, (x.shape[0], NP8, D8))
        kp, vp = pre @ wk, pre @ wv
        if bug == "prefix-keys-gathered":
            k = lax.all_gather(jnp.concatenate([kp, x @ wk], 1), "sp", axis=1, tiled=True)
            v = lax.all_gather(jnp.concatenate([vp, x @ wv], 1), "sp", axis=1, tiled=True)
        else:
            k = jnp.concatenate([kp, lax.all_gather(x @ wk, "sp", axis=1, tiled=True)], 1)
            v = jnp.concatenate([vp, lax.all_gather(x @ wv, "sp", axis=1, tiled=True)], 1)
        o_patch = attend(x @ wq, k, v)
        if bug == "cls-local-keys":
            o_cls = attend(pre[:, :1] @ wq, jnp.concatenate([kp, x @ wk], 1), jnp.concatenate([vp, x @ wv], 1))
        else:
            o_cls = attend(pre[:, :1] @ wq, k, v)
        return o_cls[:, 0], o_patch
    return f


A8 = (R(1, NP8, D8), R(B8, N8, D8), R(D8, D8, scale=0.5), R(D8, D8, scale=0.5), R(D8, D8, scale=0.5))
C.smap("s.cls_registers_replicated_prefix.sp4", {"sp": 4}, prefix_attn_sp, (P(), P(None, "sp"), P(), P(), P()),
       (P(), P(None, "sp")), prefix_attn, A8,
       bugs=[("prefix-keys-gathered", ["wrong-value"]), ("cls-local-keys", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 9. Class + registers prepended on device 0 only, key mask elsewhere.


def prefix_dev0_sp(bug):
    def f(prefix, x, wq, wk, wv):
        b, nl, _ = x.shape
        first = idx("sp") == 0
        pre = jnp.where(first, jnp.broadcast_to(prefix, (b, NP8, D8)), 0.0)
        t = jnp.concatenate([pre, x], 1)                                  # (b, NP8 + nl, D)
        valid = jnp.logical_or(first, jnp.arange(NP8 + nl) >= NP8)
        k = lax.all_gather(t @ wk, "sp", axis=1, tiled=True)
        v = lax.all_gather(t @ wv, "sp", axis=1, tiled=True)
        vk = lax.all_gather(valid, "sp", axis=0, tiled=True)
        s = jnp.einsum("bqd,bkd->bqk", t @ wq, k) / np.sqrt(D8)
        if bug != "pads-not-masked":
            s = jnp.where(vk[None, None, :], s, -1e30)
        o = jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)
        cls = o[:, 0]
        if bug != "cls-psum-no-select":
            cls = jnp.where(first, cls, 0.0)
        return psum(cls, "sp"), o[:, NP8:]
    return f


C.smap("s.cls_registers_on_device0_masked.sp4", {"sp": 4}, prefix_dev0_sp, (P(), P(None, "sp"), P(), P(), P()),
       (P(), P(None, "sp")), prefix_attn, A8,
       bugs=[("pads-not-masked", ["wrong-value"]), ("cls-psum-no-select", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 10. ViT forward under dp2 x tp4 (heads over tp).
B10, IMG, PT, CH, D, NH, MLP, NCLS = 4, 8, 2, 3, 16, 4, 32, 5
HD = D // NH
NT = (IMG // PT) ** 2 + 1


def ln(x, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = jnp.mean((x - m) ** 2, -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps)


def vit_logits(p, img, red_attn=lambda y: y, red_mlp=lambda y: y):
    t = patchify(img, PT) @ p["pe_w"] + p["pe_b"]
    b = t.shape[0]
    t = jnp.concatenate([jnp.broadcast_to(p["cls"], (b, 1, D)), t], 1) + p["pos"]
    h = ln(t) * p["g1"]
    nh = p["wq"].shape[1] // HD
    q = (h @ p["wq"]).reshape(b, NT, nh, HD)
    k = (h @ p["wk"]).reshape(b, NT, nh, HD)
    v = (h @ p["wv"]).reshape(b, NT, nh, HD)
    a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD), -1)
    o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, NT, nh * HD)
    t = t + red_attn(o @ p["wo"])
    h = ln(t) * p["g2"]
    t = t + red_mlp(jax.nn.gelu(h @ p["w1"] + p["b1"]) @ p["w2"]) + p["b2"]
    return ln(t[:, 0]) @ p["head"]


def ce(logits, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits, y)


def vit_loss(p, img, y):
    lg = vit_logits(p, img)
    return lg, jnp.mean(ce(lg, y))


def vit_tp(bug):
    def f(p, img, y):
        ra = (lambda z: z) if bug == "attn-out-no-psum" else (lambda z: psum(z, "tp"))
        rm = (lambda z: psum(z, "dp")) if bug == "mlp-psum-dp" else (lambda z: psum(z, "tp"))
        lg = vit_logits(p, img, ra, rm)
        return lg, pmean(jnp.mean(ce(lg, y)), "dp")
    return f


def vit_params():
    return {"pe_w": R(PT * PT * CH, D, scale=0.3), "pe_b": R(D, scale=0.05), "cls": R(1, 1, D, scale=0.5),
            "pos": R(NT, D, scale=0.2), "g1": 1 + R(D, scale=0.1), "wq": R(D, D, scale=0.3),
            "wk": R(D, D, scale=0.3), "wv": R(D, D, scale=0.3), "wo": R(D, D, scale=0.3),
            "g2": 1 + R(D, scale=0.1), "w1": R(D, MLP, scale=0.3), "b1": R(MLP, scale=0.05),
            "w2": R(MLP, D, scale=0.2), "b2": R(D, scale=0.05), "head": R(D, NCLS, scale=0.4)}


P10 = vit_params()
PS10 = {k: P() for k in P10}
PS10.update({"wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp", None),
             "w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None)})
A10 = (P10, R(B10, IMG, IMG, CH), I(0, NCLS, B10))
C.smap("s.vit_forward_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, vit_tp, (PS10, P("dp"), P("dp")), (P("dp"), P()),
       vit_loss, A10, bugs=[("attn-out-no-psum", ["missing-all-reduce"]), ("mlp-psum-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 11. ViT training step under dp8, AdamW with layer-wise lr decay.
B11 = 16
LR, DECAY = 3e-3, 0.65
GROUP = {k: ("embed" if k in ("pe_w", "pe_b", "cls", "pos") else "head" if k == "head" else "block") for k in P10}
DEPTH = {"embed": 2, "block": 1, "head": 0}
OPT11 = optax.multi_transform({g: optax.adamw(LR * DECAY ** d, weight_decay=0.05) for g, d in DEPTH.items()},
                              GROUP)


def vit_scalar_loss(p, img, y):
    return jnp.mean(ce(vit_logits(p, img), y))


def vit_step(p, s, img, y):
    l, g = jax.value_and_grad(vit_scalar_loss)(p, img, y)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def vit_step_dp(bug):
    def f(p, s, img, y):
        l, g = jax.value_and_grad(vit_scalar_loss)(p, img, y)
        if bug == "grads-psum":
            g = psum(g, "dp")
        elif bug != "grads-not-reduced":
            g = pmean(g, "dp")
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


def warm(x):
    x = np.asarray(x)
    if x.dtype.kind == "i":
        return np.asarray(3, x.dtype)
    if "nu" in warm.where:
        return (np.abs(R(*x.shape)) * 1e-3).astype(x.dtype)
    return (R(*x.shape) * 1e-2).astype(x.dtype)


def warm_state(s):
    def go(path, x):
        warm.where = jax.tree_util.keystr(path)
        return warm(x)
    return jax.tree_util.tree_map_with_path(go, s)


P11 = vit_params()
S11 = warm_state(OPT11.init(P11))
SS11 = jax.tree.map(lambda _: P(), S11)
PS11 = {k: P() for k in P11}
A11 = (P11, S11, R(B11, IMG, IMG, CH), I(0, NCLS, B11))
C.smap("s.vit_adamw_llrd_step.dp8", {"dp": 8}, vit_step_dp, (PS11, SS11, P("dp"), P("dp")), (PS11, SS11, P()),
       vit_step, A11, bugs=[("grads-not-reduced", ["missing-all-reduce"]), ("grads-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. bf16 patch embedding, width over sp4, LayerNorm tokens, pooled.
B12, H12, W12, C12, PT12, D12 = 2, 8, 16, 4, 4, 16


def embed_pool_sp(bug):
    def f(img, w):
        t = patchify(img, PT12)                     # local width block: whole patch columns
        e = ln(jnp.einsum("bnp,pd->bnd", t, w, preferred_element_type=f32))
        if bug == "pool-not-reduced":
            return e, e.mean(1)
        ntok = (H12 // PT12) * (W12 // PT12)
        den = e.shape[1] if bug == "pool-local-count" else ntok
        return e, psum(e.sum(1), "sp") / den
    return f


A12 = (R(B12, H12, W12, C12).astype(jnp.bfloat16), R(PT12 * PT12 * C12, D12, scale=0.2).astype(jnp.bfloat16))


def embed_pool_wmajor(img, w):
    """Tokens in (width block, row, col-in-block) order, so the width-sharded program's local tokens are one block."""
    b = img.shape[0]
    blocks = jnp.split(img, 4, axis=2)
    e = jnp.concatenate([ln(jnp.einsum("bnp,pd->bnd", patchify(x, PT12), w, preferred_element_type=f32))
                         for x in blocks], 1)
    return e, jnp.mean(ln(jnp.einsum("bnp,pd->bnd", patchify(img, PT12), w, preferred_element_type=f32)), 1)


C.smap("s.bf16_patch_embed_width_pool.sp4", {"sp": 4}, embed_pool_sp, (P(None, None, "sp"), P()),
       (P(None, "sp"), P()), embed_pool_wmajor, A12,
       bugs=[("pool-local-count", ["wrong-scale"]), ("pool-not-reduced", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 13. Class-token attention pooling over sharded patches by a distributed softmax.


def cls_pool(prefix, x, wq, wk, wv):
    return prefix_attn(prefix, x, wq, wk, wv)[0]


def cls_pool_sp(bug):
    def f(prefix, x, wq, wk, wv):
        pre = prefix[0]                                    # (NP8, D)
        q = pre[:1] @ wq                                   # (1, D)
        sp_ = jnp.einsum("qd,kd->qk", q, pre @ wk)[0] / np.sqrt(D8)          # (NP8,)
        sx = jnp.einsum("d,bkd->bk", q[0], x @ wk) / np.sqrt(D8)             # (b, nl)
        mx = jnp.maximum(jnp.max(sx, -1), jnp.max(sp_))                      # (b,)
        m = mx if bug == "max-not-pmaxed" else pmax(mx, "sp")
        ex = jnp.exp(sx - m[:, None])
        ep = jnp.exp(sp_[None] - m[:, None])                                 # (b, NP8)
        den = psum(jnp.sum(ex, -1), "sp") + jnp.sum(ep, -1)
        num = jnp.einsum("bk,bkd->bd", ex, x @ wv)
        if bug != "num-not-psummed":
            num = psum(num, "sp")
        num = num + ep @ (pre @ wv)
        return num / den[:, None]
    return f


C.smap("s.cls_pool_distributed_softmax.sp4", {"sp": 4}, cls_pool_sp, (P(), P(None, "sp"), P(), P(), P()), P(),
       cls_pool, A8, bugs=[("max-not-pmaxed", ["missing-all-reduce"]), ("num-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. ViT training step under dp2 x tp4, check_vma=True: the gradients' reductions come from the transpose.
B14 = 8


def vit_step_tp(bug):
    def f(p, s, img, y):
        nb = img.shape[0] if bug == "local-batch-denominator" else B14

        def loss(p):
            lg = vit_logits(p, img, lambda z: psum(z, "tp"), lambda z: psum(z, "tp"))
            return jnp.sum(ce(lg, y)) / nb
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grads-psum-dp-again":
            g = jax.tree.map(lambda t: psum(t, "dp"), g)
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


P14 = vit_params()
S14 = warm_state(OPT11.init(P14))
SS14 = jax.tree.map(lambda _: P(), S14)
SS14 = jax.tree_util.tree_map_with_path(
    lambda path, _: next((PS10[k] for k in PS10 if ("'%s'" % k) in jax.tree_util.keystr(path)
                          and np.ndim(_) == len(PS10[k])), P()) if np.ndim(_) else P(), S14)
A14 = (P14, S14, R(B14, IMG, IMG, CH), I(0, NCLS, B14))
C.smap("s.vit_adamw_llrd_step_vma.dp2xtp4", {"dp": 2, "tp": 4}, vit_step_tp, (PS10, SS14, P("dp"), P("dp")),
       (PS10, SS14, P()), vit_step, A14, check_vma=True,
       bugs=[("grads-psum-dp-again", ["wrong-scale"]), ("local-batch-denominator", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. MAE masking with the global noise replicated, rows sliced per device, vmap'd jnp.take and a scatter mask.
B15, N15, D15, K15 = 8, 16, 8, 4


def mae_take(x, noise):
    def one(xi, ni):
        sh = jnp.argsort(ni)
        keep = sh[:K15]
        return jnp.take(xi, keep, axis=0), jnp.ones((N15,), f32).at[keep].set(0.0)
    return jax.vmap(one)(x, noise)


def mae_take_dp(bug):
    def f(x, noise):
        bl = x.shape[0]
        off = 0 if bug == "noise-rows-offset-0" else idx("dp") * bl
        mine = lax.dynamic_slice_in_dim(noise, off, bl, axis=0)
        return mae_take(x, mine)
    return f


A15 = (R(B15, N15, D15), rng.random((B15, N15)).astype(np.float32))
C.smap("s.mae_vmap_take_scatter_mask.dp4", {"dp": 4}, mae_take_dp, (P("dp"), P()), (P("dp"), P("dp")), mae_take, A15,
       bugs=[("noise-rows-offset-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.conv_patch_embed_std_height.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), conv_embed, A1)
C.gspmd("g.mae_mask_normpix_loss.dp4", {"dp": 4}, (P("dp"),) * 4, O4, mae_step, A4)
C.gspmd("g.mae_mask_patches.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")),
        (P(None, "sp"), P(None, "sp"), P(None, "sp")), mae_mask6, A6)
C.gspmd("g.rope2d_attention_rows.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P()), P(None, "sp"), rope_attn, A3)
C.gspmd("g.vit_forward_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, (PS10, P("dp"), P("dp")), (P("dp"), P()),
        vit_loss, A10)
C.gspmd("g.vit_adamw_llrd_step.dp8", {"dp": 8}, (PS11, SS11, P("dp"), P("dp")), (PS11, SS11, P()), vit_step, A11)
C.gspmd("g.cls_registers_prefix_attn.sp4", {"sp": 4}, (P(), P(None, "sp"), P(), P(), P()), (P(), P(None, "sp")),
        prefix_attn, A8)
C.gspmd("g.vit_adamw_llrd_step.dp2xtp4", {"dp": 2, "tp": 4}, (PS10, SS14, P("dp"), P("dp")), (PS10, SS14, P()),
        vit_step, A14)
C.gspmd("g.mae_vmap_take_scatter_mask.dp4", {"dp": 4}, (P("dp"), P()), (P("dp"), P("dp")), mae_take, A15)
C.finish()
