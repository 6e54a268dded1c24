"""samples/fresh93: a 93rd batch of programs as a user writes them, on the theme of video and spatio-temporal models with the time axis, the frames, the patches or the heads sharded in current JAX / optax (3-D convolutions with causal, centred, edge-padded and strided temporal halos, ViViT tubelet embeddings, VideoMAE tube masking, TimeSformer divided space-time attention with all_to_all between layouts, TSM temporal shifts, causal video VAE down- and upsampling, frame interpolation and flow-warping losses, video diffusion temporal attention over tp, per-clip vs per-frame normalisation, frame-causal ring attention, training steps), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Conventions: videos are channel-last (b, t, h, w, c), 3-D convolutions
NDHWC / DHWIO; time over sp4 unless said; "right(n)" is the non-cyclic
ppermute i -> i + 1 (device 0 receives zeros), "left(n)" i + 1 -> i.
shard_map families:
 1. causal 3x3x3 conv (time padded by 2 in front): the left neighbour's
    last two frames by a non-cyclic ppermute, device 0 gets the zeros of
    the causal padding. Bugs: halo from the right neighbour, cyclic
    ppermute (device 0 gets the clip's end), a one-frame halo plus a zero
    frame.
 2. centred 3x3x3 conv + bias + GELU, written on device as the sum of three
    depth-1 convs over shifted windows; one halo frame from each side.
    Bugs: halos swapped, the right halo cyclic (the last device gets frame 0).
 3. ViViT tubelet embedding (2x4x4): baseline a strided Conv3d, body
    reshape + dot; the position embedding replicated and sliced at the
    device's first token. Bugs: sliced at 0, offset counted in frames.
 4. VideoMAE tube masking (mask per spatial patch from replicated noise, the
    same on every frame) and the normalised-pixel loss, sum / count both
    psum'd. Bugs: count not psum'd, the noise rolled by axis_index (a
    different mask per device).
 4b. the same loss as a pmean of per-device means: correct only because a
    tube mask gives every device the same number of masked tokens. Bug: the
    local mean returned unreduced.
 5. TimeSformer divided attention on (b, t, s, d): spatial attention local
    per frame; temporal q, k, v all_to_all'd to a patch-sharded layout
    (split s, concat t) and back. Bugs: temporal attention over the local
    frames only (no all_to_all), the all_to_all splitting the head dim.
 5b. temporal attention with a learned relative time bias, the Ulysses way
    (all_to_all split heads / concat time; device r owns head r and slices
    row r of the replicated bias table). Bugs: bias row of head 0, the
    relative index transposed.
 6. TSM (bf16): channels [0, 2) from frame t - 1, [2, 4) from t + 1, zeros
    at the clip ends, then a 1x1 conv and the residual; boundary frames by
    non-cyclic ppermutes. Bugs: first fold from the next frame, cyclic wrap,
    shift within the local block only.
 7. causal VAE temporal downsampling (stride 2 in time, the clip padded by
    replicating its first frame twice): a two-frame halo from the left,
    device 0 builds it from its own first frame (where on axis_index).
    Bugs: zeros on device 0, a one-frame halo, halo from the right.
 8. frame interpolation: frame t from t - 1 and t + 1 by two 1x1 mixes,
    Charbonnier loss on frames 1 .. T-2; value_and_grad of the device's
    share, loss and gradients psum'd. Bugs: halos swapped, mask at the
    shard edges instead of the clip edges, gradients pmean'd.
 9. photometric loss of backward warping (integer flow, nearest, clipped,
    take_along_axis on the flattened frame): the next frame of a device's
    last frame from the right, the clip's last frame masked. Bugs: next
    frame from the left, last frame unmasked.
 9b. bilinear warping of one frame with its rows over sp4: the source
    all_gather'd along rows, sampled at global row + dy. Bugs: local row
    index, sampling rows clipped to the device's block.
10. video diffusion temporal attention block, dp2 x tp4: adaLN (shift,
    scale, gate) from the timestep embedding, heads over tp, a relative
    time bias replicated and sliced at the rank's heads, wo psum'd, gated
    residual. Bugs: bias heads at 0, residual inside the psum, no psum.
11. per-clip GroupNorm (statistics per batch and group over all frames):
    sum and sum of squares psum'd (the input has a trend along time).
    Bugs: local frames only, pmean of local means and variances.
 11b. per-frame LayerNorm over (h, w, c), sp8: no collective. Bugs:
    statistics pmean'd over sp, statistics over the local clip.
12. training step of a tiny video classifier on dp2 x sp4 (check_vma=True):
    tubelet embedding, GELU, mean pool psum'd over sp, linear head, CE
    pmean'd over dp, jax.value_and_grad, optax.sgd with momentum (a momentum
    already under way). Bugs: loss not pmean'd over dp (gradients doubled),
    pooling over the local tokens only.
13. bidirectional temporal conv (causal + flip, causal, flip), the flip by a
    ppermute i -> n - 1 - i and a local reverse. Bugs: flips local only,
    the flip back local.
14. depthwise temporal conv (kernel 5) on (b, t, s, c), the window cut by
    dynamic_slice from the all_gather'd, zero-padded clip. Bugs: sliced
    from the unpadded clip, padded in front only.
15. TSM written with a reduce-scatter: each device writes its shifted folds
    into a zero buffer of the whole clip at its global offset,
    psum_scatter along time. Bugs: fold offsets swapped, psum then block 0.
16. streaming causal normalisation (frame minus the running mean so far): a
    local cumsum plus the exclusive prefix of all_gather'd block totals,
    divided by the global count. Bugs: inclusive prefix, local count.
17. frame-causal ring attention (a token attends to every token of frames
    <= its own) in lax.fori_loop with k, v passed by ppermute, online
    softmax. Bugs: source block (me + j) mod n, key frames at the own block.
18. causal VAE upsampling by depth-to-time then the causal conv; the halo is
    the left neighbour's last frame before upsampling. Bugs: halo from the
    right, the two upsampled halo frames reversed.
19. the causal conv of 1. with a cyclic ppermute whose wrapped halo device 0
    zeroes. Bug: zeroed on the last device instead.
20. time reversal then a 1x1 mix: an untiled all_gather indexed at
    n - 1 - me and a local flip. Bugs: own block, no local flip.
21. centred temporal conv with edge (replicate) padding: halos from both
    neighbours, the end devices repeat their own edge frame. Bugs: zero
    edges, the last edge on device 0.
GSPMD pairs (jax.jit with in / out shardings, correct): the centred conv +
GELU of 2.; the VAE downsampling of 7. then SiLU and the causal conv of 1.;
divided attention with with_sharding_constraint switching time-sharded ->
patch-sharded -> time-sharded; the TSM of 6. (bf16); per-clip GroupNorm then
per-frame LayerNorm (sp8); an optax.adamw training step of the block of 10.
(dp2 x tp4, heads sharded); the warp loss of 9.; the tubelet Conv3d of 3.;
the bidirectional conv of 13.; depth-to-time + causal conv of 18.; the
running-mean normalisation of 16. (cumsum along sharded time); the
frame-causal attention of 17.; the edge-padded conv of 21.; a cyclic
jnp.roll in time followed by the reversed mix of 20.
Numerics: every correct pair agrees with its baseline at rounding level
(f32 within 2e-6, most exactly); every bug variant differs clearly (see
"numerics"). Nothing was dropped; one first-draft bug (tubelet position
offset "in frames" times the patch rows) equalled the correct offset and
was changed to frames alone.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh93.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh93.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh93.py"
C = Corpus("samples/fresh93", SCRIPT, "samples/gen/run_fresh93.sh", sys.argv[1:])
rng, R, I = seeded(9393)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
DN = ("NDHWC", "DHWIO", "NDHWC")
NSP = 4


def conv3d(x, w, pad, stride=(1, 1, 1)):
    return lax.conv_general_dilated(x, w, stride, pad, dimension_numbers=DN)


def right(n):
    """non-cyclic: device i sends to i + 1 (device 0 receives zeros)."""
    return [(i, i + 1) for i in range(n - 1)]


def left(n):
    """non-cyclic: device i + 1 sends to i (the last device receives zeros)."""
    return [(i + 1, i) for i in range(n - 1)]


def layer_norm(x, axes, eps=1e-5):
    m = jnp.mean(x, axes, keepdims=True)
    v = jnp.mean(jnp.square(x - m), axes, keepdims=True)
    return (x - m) * lax.rsqrt(v + eps)


B, T, H, W, CH = 2, 16, 4, 4, 4

# ---------------------------------------------------------------------------
# 1. causal 3-D convolution (kernel 3x3x3, time padded by 2 in front),
#    time over sp4: the last two frames of the left neighbour by a
#    non-cyclic ppermute (device 0 receives zeros = the causal padding).


def causal_conv(x, w):
    return conv3d(x, w, [(2, 0), (1, 1), (1, 1)])


def causal_conv_sp(bug):
    def f(x, w):
        if bug == "halo-from-right":
            halo = lax.ppermute(x[:, :2], "sp", left(NSP))
        elif bug == "cyclic-halo":
            halo = lax.ppermute(x[:, -2:], "sp", [(i, (i + 1) % NSP) for i in range(NSP)])
        elif bug == "one-frame-halo":
            one = lax.ppermute(x[:, -1:], "sp", right(NSP))
            halo = jnp.concatenate([jnp.zeros_like(one), one], 1)
        else:
            halo = lax.ppermute(x[:, -2:], "sp", right(NSP))
        return conv3d(jnp.concatenate([halo, x], 1), w, [(0, 0), (1, 1), (1, 1)])
    return f


C.smap("s.causal_conv3d_left_halo.sp4", {"sp": NSP}, causal_conv_sp, (P(None, "sp"), P()), P(None, "sp"),
       causal_conv, (R(B, T, H, W, CH), R(3, 3, 3, CH, 8, scale=0.2)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("cyclic-halo", ["wrong-permutation"]),
             ("one-frame-halo", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 2. centred 3-D convolution + bias + GELU, written on device as a sum of
#    three depth-1 convolutions over shifted frame windows; one frame of
#    halo from each neighbour, zeros at the clip ends.


def centred_conv(x, w, b):
    return jax.nn.gelu(conv3d(x, w, [(1, 1), (1, 1), (1, 1)]) + b)


def centred_conv_sp(bug):
    def f(x, w, b):
        tl = x.shape[1]
        lo = lax.ppermute(x[:, -1:], "sp", right(NSP))
        if bug == "right-halo-cyclic":
            hi = lax.ppermute(x[:, :1], "sp", [((i + 1) % NSP, i) for i in range(NSP)])
        else:
            hi = lax.ppermute(x[:, :1], "sp", left(NSP))
        if bug == "halos-swapped":
            lo, hi = hi, lo
        xx = jnp.concatenate([lo, x, hi], 1)
        y = sum(conv3d(xx[:, dt:dt + tl], w[dt:dt + 1], [(0, 0), (1, 1), (1, 1)]) for dt in range(3))
        return jax.nn.gelu(y + b)
    return f


C.smap("s.centred_conv3d_two_halos_taps.sp4", {"sp": NSP}, centred_conv_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), centred_conv, (R(B, T, H, W, CH), R(3, 3, 3, CH, 8, scale=0.2), R(8, scale=0.1)),
       bugs=[("halos-swapped", ["wrong-permutation"]), ("right-halo-cyclic", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 3. ViViT tubelet embedding (2x4x4 tubelets), time over sp4: the baseline a
#    strided Conv3d, the body reshape + dot; tokens ordered (t, h, w) so a
#    device's tokens are a contiguous block; the learned position embedding
#    passed replicated and sliced at the device's first token.
TB, HB, WB, C3, D3 = 16, 8, 8, 3, 16
NTOK = (TB // 2) * (HB // 4) * (WB // 4)


def tubelet_embed(x, w, b, pos):
    y = conv3d(x, w, "VALID", (2, 4, 4)) + b
    return y.reshape(x.shape[0], -1, w.shape[-1]) + pos


def patchify(x, kt=2, kh=4, kw=4):
    b, t, h, w, c = x.shape
    x = x.reshape(b, t // kt, kt, h // kh, kh, w // kw, kw, c).transpose(0, 1, 3, 5, 2, 4, 6, 7)
    return x.reshape(b, (t // kt) * (h // kh) * (w // kw), kt * kh * kw * c)


def tubelet_sp(bug):
    def f(x, w, b, pos):
        tok = patchify(x)
        n = tok.shape[1]
        y = jnp.dot(tok, w.reshape(-1, w.shape[-1])) + b
        if bug == "pos-at-offset-0":
            off = 0
        elif bug == "pos-offset-in-frames":
            off = idx("sp") * x.shape[1]
        else:
            off = idx("sp") * n
        return y + lax.dynamic_slice_in_dim(pos, off, n, 0)
    return f


C.smap("s.vivit_tubelet_embed_pos_slice.sp4", {"sp": NSP}, tubelet_sp, (P(None, "sp"), P(), P(), P()),
       P(None, "sp"), tubelet_embed,
       (R(2, TB, HB, WB, C3), R(2, 4, 4, C3, D3, scale=0.1), R(D3, scale=0.1), R(NTOK, D3, scale=0.5)),
       bugs=[("pos-at-offset-0", ["wrong-offset"]), ("pos-offset-in-frames", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. VideoMAE tube masking and the normalised-pixel reconstruction loss,
#    patch tokens (b, t', s, p) with t' over sp4: the mask is drawn per
#    spatial patch from replicated noise (the same on every frame, "tubes");
#    targets normalised per patch; loss = sum over masked / number masked,
#    both psum'd.
TP4, S4, P4, KEEP4 = 8, 8, 12, 4


def tube_mask(noise):
    rank = jnp.argsort(jnp.argsort(noise, axis=1), axis=1)
    return (rank >= KEEP4).astype(jnp.float32)  # 1 = masked


def norm_pix(t):
    m = jnp.mean(t, -1, keepdims=True)
    v = jnp.var(t, -1, keepdims=True)
    return (t - m) / jnp.sqrt(v + 1e-6)


def mae_loss(pred, patches, noise):
    mask = tube_mask(noise)[:, None, :]
    err = jnp.mean(jnp.square(pred - norm_pix(patches)), -1)
    return jnp.sum(err * mask) / (jnp.sum(mask) * patches.shape[1])


def mae_loss_sp(bug):
    def f(pred, patches, noise):
        if bug == "noise-rolled-per-device":
            noise = jnp.roll(noise, idx("sp"), axis=1)
        mask = jnp.broadcast_to(tube_mask(noise)[:, None, :], pred.shape[:3])
        err = jnp.mean(jnp.square(pred - norm_pix(patches)), -1)
        num = psum(jnp.sum(err * mask), "sp")
        den = jnp.sum(mask) if bug == "count-not-psummed" else psum(jnp.sum(mask), "sp")
        return num / den
    return f


MAE_ARGS = (R(2, TP4, S4, P4), R(2, TP4, S4, P4), R(2, S4))
C.smap("s.videomae_tube_mask_normpix_loss.sp4", {"sp": NSP}, mae_loss_sp, (P(None, "sp"), P(None, "sp"), P()), P(),
       mae_loss, MAE_ARGS,
       bugs=[("count-not-psummed", ["missing-all-reduce"]), ("noise-rolled-per-device", ["wrong-offset"])])


# 4b. the same loss as the pmean of per-device means: correct only because
#     a tube mask gives every device the same number of masked tokens.
def mae_loss_pmean(bug):
    def f(pred, patches, noise):
        mask = tube_mask(noise)[:, None, :]
        err = jnp.mean(jnp.square(pred - norm_pix(patches)), -1)
        local = jnp.sum(err * mask) / (jnp.sum(mask) * pred.shape[1])
        if bug == "local-mean-not-reduced":
            return local
        return pmean(local, "sp")
    return f


C.smap("s.videomae_tube_loss_pmean_equal_counts.sp4", {"sp": NSP}, mae_loss_pmean,
       (P(None, "sp"), P(None, "sp"), P()), P(), mae_loss, MAE_ARGS,
       bugs=[("local-mean-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. TimeSformer divided space-time attention, x (b, t, s, d) with time over
#    sp4: spatial attention per frame is local; for the temporal attention
#    q, k, v are projected in the time-sharded layout and all_to_all'd to
#    a patch-sharded layout (split s, concat t), attended over all frames,
#    and all_to_all'd back before the output projection.
T5, S5, D5, H5 = 8, 8, 16, 4
E5 = D5 // H5


def mha(q, k, v):
    """(..., L, h, e) attention over L."""
    s = jnp.einsum("...qhe,...khe->...hqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("...hqk,...khe->...qhe", jax.nn.softmax(s, -1), v)


def heads(x, w):
    return jnp.einsum("btsd,dhe->btshe", x, w)


def divided_attn(x, ws, wt):
    wq, wk, wv, wo = ws
    h = layer_norm(x, -1)
    x = x + jnp.einsum("btshe,hed->btsd", mha(heads(h, wq), heads(h, wk), heads(h, wv)), wo)
    wq, wk, wv, wo = wt
    h = layer_norm(x, -1)
    q, k, v = (jnp.swapaxes(heads(h, w_), 1, 2) for w_ in (wq, wk, wv))  # (b, s, t, h, e)
    o = jnp.swapaxes(mha(q, k, v), 1, 2)
    return x + jnp.einsum("btshe,hed->btsd", o, wo)


def divided_sp(bug):
    def f(x, ws, wt):
        wq, wk, wv, wo = ws
        h = layer_norm(x, -1)
        x = x + jnp.einsum("btshe,hed->btsd", mha(heads(h, wq), heads(h, wk), heads(h, wv)), wo)
        wq, wk, wv, wo = wt
        h = layer_norm(x, -1)
        q, k, v = (heads(h, w_) for w_ in (wq, wk, wv))  # (b, t/4, s, h, e)
        split = 4 if bug == "a2a-split-head-dim" else 2
        if bug != "temporal-over-local-frames":
            q, k, v = (lax.all_to_all(a, "sp", split, 1, tiled=True) for a in (q, k, v))  # (b, t, s/4, h, e)
        o = jnp.swapaxes(mha(*(jnp.swapaxes(a, 1, 2) for a in (q, k, v))), 1, 2)
        if bug != "temporal-over-local-frames":
            o = lax.all_to_all(o, "sp", 1, split, tiled=True)
        return x + jnp.einsum("btshe,hed->btsd", o, wo)
    return f


def wset(d, h, e, scale=0.25):
    return (R(d, h, e, scale=scale), R(d, h, e, scale=scale), R(d, h, e, scale=scale), R(h, e, d, scale=scale))


WS5, WT5 = wset(D5, H5, E5), wset(D5, H5, E5)
X5 = R(2, T5, S5, D5)
C.smap("s.timesformer_divided_attn_a2a_patches.sp4", {"sp": NSP}, divided_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), divided_attn, (X5, WS5, WT5),
       bugs=[("temporal-over-local-frames", ["missing-collective"]), ("a2a-split-head-dim", ["wrong-axis"])])


# 5b. temporal attention with a learned relative time bias per head, the
#     Ulysses way: q, k, v all_to_all'd from time-sharded to head-sharded
#     (split heads, concat time), so device r owns head r and adds row r of
#     the replicated bias table (h, 2t - 1).
def temporal_relbias(x, wq, wk, wv, wo, table):
    h = layer_norm(x, -1)
    q, k, v = (jnp.swapaxes(heads(h, w_), 1, 2) for w_ in (wq, wk, wv))  # (b, s, t, h, e)
    s = jnp.einsum("bsqhe,bskhe->bshqk", q, k) / np.sqrt(q.shape[-1])
    t = x.shape[1]
    rel = jnp.arange(t)[:, None] - jnp.arange(t)[None, :] + t - 1
    s = s + table[:, rel]
    o = jnp.einsum("bshqk,bskhe->bsqhe", jax.nn.softmax(s, -1), v)
    return x + jnp.einsum("bsthe,hed->btsd", o, wo)


def temporal_ulysses(bug):
    def f(x, wq, wk, wv, wo, table):
        h = layer_norm(x, -1)
        q, k, v = (lax.all_to_all(heads(h, w_), "sp", 3, 1, tiled=True) for w_ in (wq, wk, wv))  # (b, t, s, 1, e)
        t = q.shape[1]
        hl = q.shape[3]
        hoff = 0 if bug == "bias-row-of-head-0" else idx("sp") * hl
        tab = lax.dynamic_slice_in_dim(table, hoff, hl, 0)
        rel = jnp.arange(t)[:, None] - jnp.arange(t)[None, :] + t - 1
        if bug == "bias-transposed":
            rel = rel.T
        s = jnp.einsum("bqshe,bkshe->bshqk", q, k) / np.sqrt(q.shape[-1]) + tab[:, rel]
        o = jnp.einsum("bshqk,bkshe->bqshe", jax.nn.softmax(s, -1), v)
        o = lax.all_to_all(o, "sp", 1, 3, tiled=True)
        return x + jnp.einsum("btshe,hed->btsd", o, wo)
    return f


C.smap("s.temporal_relbias_ulysses_heads.sp4", {"sp": NSP}, temporal_ulysses, (P(None, "sp"),) + (P(),) * 5,
       P(None, "sp"), temporal_relbias, (X5,) + WT5 + (R(H5, 2 * T5 - 1),),
       bugs=[("bias-row-of-head-0", ["wrong-offset"]), ("bias-transposed", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. TSM temporal shift (bf16), time over sp4: channels [0, f) take frame
#    t - 1, channels [f, 2f) frame t + 1, zeros at the clip ends; then a 1x1
#    conv on the shifted tensor and the residual. The frames that cross a
#    device boundary go by non-cyclic ppermute.
C6, F6 = 16, 2


def tsm(x, w):
    a = jnp.pad(x[:, :-1, ..., :F6], ((0, 0), (1, 0), (0, 0), (0, 0), (0, 0)))
    b = jnp.pad(x[:, 1:, ..., F6:2 * F6], ((0, 0), (0, 1), (0, 0), (0, 0), (0, 0)))
    s = jnp.concatenate([a, b, x[..., 2 * F6:]], -1)
    return x + jnp.einsum("bthwc,cd->bthwd", s, w)


def tsm_sp(bug):
    def f(x, w):
        if bug == "shift-local-only":
            from_l = jnp.zeros_like(x[:, -1:, ..., :F6])
            from_r = jnp.zeros_like(x[:, :1, ..., F6:2 * F6])
        elif bug == "cyclic-wrap":
            from_l = lax.ppermute(x[:, -1:, ..., :F6], "sp", [(i, (i + 1) % NSP) for i in range(NSP)])
            from_r = lax.ppermute(x[:, :1, ..., F6:2 * F6], "sp", [((i + 1) % NSP, i) for i in range(NSP)])
        else:
            from_l = lax.ppermute(x[:, -1:, ..., :F6], "sp", right(NSP))
            from_r = lax.ppermute(x[:, :1, ..., F6:2 * F6], "sp", left(NSP))
        if bug == "first-fold-from-next-frame":
            a = jnp.concatenate([x[:, 1:, ..., :F6], lax.ppermute(x[:, :1, ..., :F6], "sp", left(NSP))], 1)
        else:
            a = jnp.concatenate([from_l, x[:, :-1, ..., :F6]], 1)
        b = jnp.concatenate([x[:, 1:, ..., F6:2 * F6], from_r], 1)
        s = jnp.concatenate([a, b, x[..., 2 * F6:]], -1)
        return x + jnp.einsum("bthwc,cd->bthwd", s, w)
    return f


C.smap("s.tsm_temporal_shift_bf16.sp4", {"sp": NSP}, tsm_sp, (P(None, "sp"), P()), P(None, "sp"), tsm,
       (R(B, T, 2, 2, C6, dt=jnp.bfloat16), R(C6, C6, scale=0.2, dt=jnp.bfloat16)),
       bugs=[("first-fold-from-next-frame", ["wrong-permutation"]), ("cyclic-wrap", ["wrong-permutation"]),
             ("shift-local-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. causal video VAE temporal downsampling: kernel 3x3x3, stride 2 in time,
#    the clip padded in front by replicating its first frame twice
#    (CausalConv3d with replicate padding); time over sp4 (4 frames -> 2 per
#    device): 2 frames of halo from the left neighbour, device 0 builds its
#    halo from its own first frame.


def vae_down(x, w):
    xp = jnp.concatenate([x[:, :1], x[:, :1], x], 1)
    return conv3d(xp, w, [(0, 0), (1, 1), (1, 1)], (2, 1, 1))


def vae_down_sp(bug):
    def f(x, w):
        me = idx("sp")
        if bug == "one-frame-halo":
            halo = lax.ppermute(x[:, -1:], "sp", right(NSP))
            halo = jnp.where(me == 0, x[:, :1], halo)
        elif bug == "halo-from-right":
            halo = lax.ppermute(x[:, :2], "sp", left(NSP))
            halo = jnp.where(me == 0, jnp.concatenate([x[:, :1], x[:, :1]], 1), halo)
        else:
            halo = lax.ppermute(x[:, -2:], "sp", right(NSP))
            if bug != "zero-pad-on-device-0":
                halo = jnp.where(me == 0, jnp.concatenate([x[:, :1], x[:, :1]], 1), halo)
        return conv3d(jnp.concatenate([halo, x], 1), w, [(0, 0), (1, 1), (1, 1)], (2, 1, 1))
    return f


C.smap("s.causal_vae_temporal_downsample_replicate_pad.sp4", {"sp": NSP}, vae_down_sp, (P(None, "sp"), P()),
       P(None, "sp"), vae_down, (R(B, T, H, W, CH) + 1.0, R(3, 3, 3, CH, 8, scale=0.2)),
       bugs=[("zero-pad-on-device-0", ["wrong-offset"]), ("one-frame-halo", ["wrong-offset"]),
             ("halo-from-right", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. frame interpolation loss and its gradient: frame t predicted from
#    frames t - 1 and t + 1 by two 1x1 channel mixes, Charbonnier loss on the
#    interior frames 1 .. T-2, mean; time over sp4 with one halo frame from
#    each side; value_and_grad of the device's share, psum'd.


def interp_loss(wp, wn, x):
    pred = jnp.einsum("bthwc,cd->bthwd", x[:, :-2], wp) + jnp.einsum("bthwc,cd->bthwd", x[:, 2:], wn)
    return jnp.mean(jnp.sqrt(jnp.square(pred - x[:, 1:-1]) + 1e-6))


def interp_both(wp, wn, x):
    return jax.value_and_grad(interp_loss, (0, 1))(wp, wn, x)


def interp_sp(bug):
    def f(wp, wn, x):
        tl = x.shape[1]
        lo = lax.ppermute(x[:, -1:], "sp", right(NSP))
        hi = lax.ppermute(x[:, :1], "sp", left(NSP))
        if bug == "halos-swapped":
            lo, hi = hi, lo
        xx = jnp.concatenate([lo, x, hi], 1)
        tg = idx("sp") * tl + jnp.arange(tl)
        if bug == "mask-shard-edges":
            ok = (jnp.arange(tl) >= 1) & (jnp.arange(tl) <= tl - 2)
        else:
            ok = (tg >= 1) & (tg <= T - 2)
        count = (T - 2) * x.shape[0] * x.shape[2] * x.shape[3] * x.shape[4]

        def share(wp, wn):
            pred = jnp.einsum("bthwc,cd->bthwd", xx[:, :-2], wp) + jnp.einsum("bthwc,cd->bthwd", xx[:, 2:], wn)
            e = jnp.sqrt(jnp.square(pred - x) + 1e-6)
            return jnp.sum(jnp.where(ok[None, :, None, None, None], e, 0.0)) / count
        l, g = jax.value_and_grad(share, (0, 1))(wp, wn)
        if bug == "grads-pmean":
            return psum(l, "sp"), jax.tree.map(lambda a: pmean(a, "sp"), g)
        return psum(l, "sp"), jax.tree.map(lambda a: psum(a, "sp"), g)
    return f


C.smap("s.frame_interp_charbonnier_grad.sp4", {"sp": NSP}, interp_sp, (P(), P(), P(None, "sp")), (P(), (P(), P())),
       interp_both, (R(CH, CH, scale=0.5), R(CH, CH, scale=0.5), R(B, T, H, W, CH)),
       bugs=[("halos-swapped", ["wrong-permutation"]), ("mask-shard-edges", ["wrong-offset"]),
             ("grads-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. photometric loss of backward warping: frame t + 1 warped to frame t by
#    an integer flow (nearest sampling, clipped to the frame) with a gather
#    on the flattened pixels; time over sp4, the next frame of a device's
#    last frame from the right neighbour; the last frame of the clip has no
#    next frame and is masked.
T9, H9, W9, C9 = 8, 6, 6, 3


def warp_nearest(img, fl):
    """img (b, h, w, c), fl (b, h, w, 2) int (dy, dx)."""
    b, h, w, c = img.shape
    ys = jnp.clip(jnp.arange(h)[None, :, None] + fl[..., 0], 0, h - 1)
    xs = jnp.clip(jnp.arange(w)[None, None, :] + fl[..., 1], 0, w - 1)
    flat = img.reshape(b, h * w, c)
    return jnp.take_along_axis(flat, (ys * w + xs).reshape(b, h * w, 1), 1).reshape(b, h, w, c)


def photo_loss(x, fl):
    warped = jax.vmap(warp_nearest, (1, 1), 1)(x[:, 1:], fl[:, :-1])
    return jnp.mean(jnp.abs(x[:, :-1] - warped))


def photo_sp(bug):
    def f(x, fl):
        tl = x.shape[1]
        if bug == "next-from-left":
            nxt = lax.ppermute(x[:, -1:], "sp", right(NSP))
        else:
            nxt = lax.ppermute(x[:, :1], "sp", left(NSP))
        xn = jnp.concatenate([x[:, 1:], nxt], 1)
        warped = jax.vmap(warp_nearest, (1, 1), 1)(xn, fl)
        tg = idx("sp") * tl + jnp.arange(tl)
        ok = jnp.ones((tl,), bool) if bug == "last-frame-unmasked" else tg < T9 - 1
        s = jnp.sum(jnp.where(ok[None, :, None, None, None], jnp.abs(x - warped), 0.0))
        return psum(s, "sp") / ((T9 - 1) * x.shape[0] * H9 * W9 * C9)
    return f


C.smap("s.flow_warp_photometric_next_frame.sp4", {"sp": NSP}, photo_sp, (P(None, "sp"), P(None, "sp")), P(),
       photo_loss, (R(B, T9, H9, W9, C9), I(-2, 3, B, T9, H9, W9, 2)),
       bugs=[("next-from-left", ["wrong-permutation"]), ("last-frame-unmasked", ["wrong-offset"])])

# 9b. bilinear warping of one frame with its rows over sp4: the source
#     frame all_gather'd along its rows, sample rows at global row + dy.
H9B, W9B = 16, 8


def warp_bilinear(img, fl):
    b, h, w, c = img.shape
    yy = jnp.arange(h, dtype=jnp.float32)[None, :, None] + fl[..., 0]
    xx = jnp.arange(w, dtype=jnp.float32)[None, None, :] + fl[..., 1]
    return sample_bilinear(img, yy, xx)


def sample_bilinear(img, yy, xx):
    b, h, w, c = img.shape
    y0, x0 = jnp.floor(yy), jnp.floor(xx)
    ay, ax = (yy - y0)[..., None], (xx - x0)[..., None]
    flat = img.reshape(b, h * w, c)

    def at(yi, xi):
        yi = jnp.clip(yi, 0, h - 1).astype(jnp.int32)
        xi = jnp.clip(xi, 0, w - 1).astype(jnp.int32)
        i = (yi * w + xi).reshape(b, -1, 1)
        return jnp.take_along_axis(flat, i, 1).reshape(yi.shape + (c,))
    return ((1 - ay) * (1 - ax) * at(y0, x0) + (1 - ay) * ax * at(y0, x0 + 1)
            + ay * (1 - ax) * at(y0 + 1, x0) + ay * ax * at(y0 + 1, x0 + 1))


def warp_rows_sp(bug):
    def f(img, fl):
        full = lax.all_gather(img, "sp", axis=1, tiled=True)
        hl = img.shape[1]
        r0 = 0 if bug == "local-row-index" else idx("sp") * hl
        yy = (r0 + jnp.arange(hl)).astype(jnp.float32)[None, :, None] + fl[..., 0]
        if bug == "clip-to-block":
            yy = jnp.clip(yy, r0, r0 + hl - 1)
        xx = jnp.arange(img.shape[2], dtype=jnp.float32)[None, None, :] + fl[..., 1]
        return sample_bilinear(full, yy, xx)
    return f


C.smap("s.bilinear_warp_rows_allgather.sp4", {"sp": NSP}, warp_rows_sp, (P(None, "sp"), P(None, "sp")),
       P(None, "sp"), warp_bilinear, (R(2, H9B, W9B, C9), R(2, H9B, W9B, 2, scale=2.5)),
       bugs=[("local-row-index", ["wrong-offset"]), ("clip-to-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. video diffusion temporal attention block, dp2 x tp4: batch over dp,
#     heads over tp (wq / wk / wv sharded on heads, wo on its head rows);
#     adaLN modulation (shift, scale, gate) from the timestep embedding by a
#     replicated projection; a learned relative time bias (heads, 2T - 1)
#     passed replicated and sliced at the rank's heads; out psum'd over tp,
#     gated, residual added once.
T10, S10, D10, H10 = 8, 4, 16, 8
E10 = D10 // H10


def temporal_block(x, temb, wada, wq, wk, wv, wo, table):
    shift, scale, gate = jnp.split(jnp.dot(jax.nn.silu(temb), wada), 3, -1)
    h = layer_norm(x, -1) * (1 + scale[:, None, None]) + shift[:, None, None]
    q, k, v = (jnp.einsum("btsd,dhe->bsthe", h, w_) for w_ in (wq, wk, wv))
    t = x.shape[1]
    rel = jnp.arange(t)[:, None] - jnp.arange(t)[None, :] + t - 1
    s = jnp.einsum("bsqhe,bskhe->bshqk", q, k) / np.sqrt(E10) + table[:, rel]
    o = jnp.einsum("bshqk,bskhe->bsqhe", jax.nn.softmax(s, -1), v)
    return x + gate[:, None, None] * jnp.einsum("bsthe,hed->btsd", o, wo)


def temporal_block_tp(bug):
    def f(x, temb, wada, wq, wk, wv, wo, table):
        shift, scale, gate = jnp.split(jnp.dot(jax.nn.silu(temb), wada), 3, -1)
        h = layer_norm(x, -1) * (1 + scale[:, None, None]) + shift[:, None, None]
        q, k, v = (jnp.einsum("btsd,dhe->bsthe", h, w_) for w_ in (wq, wk, wv))
        hl, t = q.shape[3], x.shape[1]
        hoff = 0 if bug == "bias-heads-at-0" else idx("tp") * hl
        tab = lax.dynamic_slice_in_dim(table, hoff, hl, 0)
        rel = jnp.arange(t)[:, None] - jnp.arange(t)[None, :] + t - 1
        s = jnp.einsum("bsqhe,bskhe->bshqk", q, k) / np.sqrt(E10) + tab[:, rel]
        o = jnp.einsum("bshqk,bskhe->bsqhe", jax.nn.softmax(s, -1), v)
        y = jnp.einsum("bsthe,hed->btsd", o, wo)
        if bug == "residual-inside-psum":
            return psum(x + gate[:, None, None] * y, "tp")
        if bug == "no-psum":
            return x + gate[:, None, None] * y
        return x + gate[:, None, None] * psum(y, "tp")
    return f


TB10 = (R(4, T10, S10, D10), R(4, D10), R(D10, 3 * D10, scale=0.2), R(D10, H10, E10, scale=0.3),
        R(D10, H10, E10, scale=0.3), R(D10, H10, E10, scale=0.3), R(H10, E10, D10, scale=0.3), R(H10, 2 * T10 - 1))
C.smap("s.video_diffusion_temporal_block_adaln.dp2xtp4", {"dp": 2, "tp": 4}, temporal_block_tp,
       (P("dp"), P("dp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P()), P("dp"),
       temporal_block, TB10,
       bugs=[("bias-heads-at-0", ["wrong-offset"]), ("residual-inside-psum", ["wrong-scale"]),
             ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. per-clip GroupNorm (video VAE style): statistics per (batch, group)
#     over all frames, time over sp4: sum and sum of squares psum'd.
G11, C11 = 4, 8


def clip_groupnorm(x, g, b):
    bb, t, h, w, c = x.shape
    xg = x.reshape(bb, t, h, w, G11, c // G11)
    m = jnp.mean(xg, (1, 2, 3, 5), keepdims=True)
    v = jnp.var(xg, (1, 2, 3, 5), keepdims=True)
    return ((xg - m) / jnp.sqrt(v + 1e-5)).reshape(x.shape) * g + b


def clip_groupnorm_sp(bug):
    def f(x, g, b):
        bb, t, h, w, c = x.shape
        xg = x.reshape(bb, t, h, w, G11, c // G11)
        n = t * h * w * (c // G11)
        s1 = jnp.sum(xg, (1, 2, 3, 5), keepdims=True)
        s2 = jnp.sum(jnp.square(xg), (1, 2, 3, 5), keepdims=True)
        if bug == "local-frames-only":
            m, v = s1 / n, s2 / n - jnp.square(s1 / n)
        elif bug == "pmean-of-local-variances":
            m = pmean(s1 / n, "sp")
            v = pmean(s2 / n - jnp.square(s1 / n), "sp")
        else:
            m = psum(s1, "sp") / (n * NSP)
            v = psum(s2, "sp") / (n * NSP) - jnp.square(m)
        return ((xg - m) * lax.rsqrt(v + 1e-5)).reshape(x.shape) * g + b
    return f


X11 = R(B, T, H, W, C11) + np.linspace(-1.5, 1.5, T, dtype=np.float32)[None, :, None, None, None]
C.smap("s.per_clip_groupnorm_sums.sp4", {"sp": NSP}, clip_groupnorm_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), clip_groupnorm, (X11, 1.0 + R(C11, scale=0.2), R(C11, scale=0.2)),
       bugs=[("local-frames-only", ["missing-all-reduce"]), ("pmean-of-local-variances", ["wrong-collective-op"])])


# 11b. per-frame normalisation (LayerNorm over h, w, c of each frame), time
#      over sp8: nothing to reduce across devices.
def frame_norm(x, g, b):
    return layer_norm(x, (2, 3, 4)) * g + b


def frame_norm_sp(bug):
    def f(x, g, b):
        if bug == "stats-pmean-over-sp":
            m = pmean(jnp.mean(x, (2, 3, 4), keepdims=True), "sp")
            v = pmean(jnp.mean(jnp.square(x - m), (2, 3, 4), keepdims=True), "sp")
            return (x - m) * lax.rsqrt(v + 1e-5) * g + b
        if bug == "stats-over-local-clip":
            return layer_norm(x, (1, 2, 3, 4)) * g + b
        return layer_norm(x, (2, 3, 4)) * g + b
    return f


C.smap("s.per_frame_layernorm_no_collective.sp8", {"sp": 8}, frame_norm_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), frame_norm, (X11, 1.0 + R(C11, scale=0.2), R(C11, scale=0.2)),
       bugs=[("stats-pmean-over-sp", ["wrong-collective-op"]), ("stats-over-local-clip", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 12. training step of a tiny video classifier on dp2 x sp4 (check_vma=True):
#     tubelet embedding (reshape + dot), GELU, mean pool over all tokens
#     (psum over sp / token count), linear head, cross-entropy pmean'd over
#     dp; jax.grad of replicated parameters (their gradients summed by the
#     transpose of the implicit broadcast); optax.sgd with momentum.
TB12, NC12, D12 = 8, 5, 16
OPT12 = optax.sgd(0.1, momentum=0.9)


def clf_loss(p, x, y):
    tok = jax.nn.gelu(jnp.dot(patchify(x, 2, 2, 2), p["we"]) + p["be"])
    pooled = jnp.mean(tok, 1)
    lg = jnp.dot(pooled, p["wh"]) + p["bh"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y))


def clf_step(p, s, x, y):
    l, g = jax.value_and_grad(clf_loss)(p, x, y)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def clf_step_sp(bug):
    def f(p, s, x, y):
        def loss(p):
            tok = jax.nn.gelu(jnp.dot(patchify(x, 2, 2, 2), p["we"]) + p["be"])
            if bug == "pool-local-tokens":
                pooled = jnp.mean(tok, 1)
            else:
                pooled = psum(jnp.sum(tok, 1), "sp") / (tok.shape[1] * NSP)
            lg = jnp.dot(pooled, p["wh"]) + p["bh"]
            ce = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, y))
            if bug == "pool-local-tokens":
                return pmean(ce, ("dp", "sp"))
            return ce if bug == "loss-not-pmean-dp" else pmean(ce, "dp")
        l, g = jax.value_and_grad(loss)(p)
        if bug == "loss-not-pmean-dp":
            l = pmean(l, "dp")
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P12 = {"we": R(2 * 2 * 2 * 3, D12, scale=0.3), "be": R(D12, scale=0.1), "wh": R(D12, NC12, scale=0.3),
       "bh": R(NC12, scale=0.1)}
S12 = OPT12.init(P12)
S12 = jax.tree.map(lambda a: a + 0.01 * np.ones_like(a), S12)  # a momentum already under way
SPEC12 = jax.tree.map(lambda _: P(), P12)
SS12 = state_specs(S12, SPEC12)
C.smap("s.video_classifier_sgd_momentum_step.dp2xsp4", {"dp": 2, "sp": NSP}, clf_step_sp,
       (SPEC12, SS12, P("dp", "sp"), P("dp")), (SPEC12, SS12, P()), clf_step,
       (P12, S12, R(4, TB12, 4, 4, 3), I(0, NC12, 4)), check_vma=True,
       bugs=[("loss-not-pmean-dp", ["wrong-scale"]), ("pool-local-tokens", ["missing-all-reduce"])])

# ===========================================================================
# GSPMD pairs (jax.jit with in / out shardings; correct)

# 13. the centred 3-D conv + GELU of 2. with time over sp4
C.gspmd("g.centred_conv3d_gelu_time_sharded.sp4", {"sp": NSP}, (P(None, "sp"), P(), P()), P(None, "sp"),
        centred_conv, (R(B, T, H, W, CH), R(3, 3, 3, CH, 8, scale=0.2), R(8, scale=0.1)))

# 14. the causal VAE temporal downsampling of 7. with time over sp4, SiLU,
#     then the causal conv of 1. (stride 1)
def vae_two(x, w1, w2):
    y = jax.nn.silu(vae_down(x, w1))
    return causal_conv(y, w2)


C.gspmd("g.causal_vae_down_then_causal_conv.sp4", {"sp": NSP}, (P(None, "sp"), P(), P()), P(None, "sp"),
        vae_two, (R(B, T, H, W, CH), R(3, 3, 3, CH, 8, scale=0.2), R(3, 3, 3, 8, 4, scale=0.2)))

# 15. divided space-time attention of 5. with with_sharding_constraint
#     switching from time-sharded to patch-sharded and back
M15 = make_mesh({"sp": NSP})


def divided_wsc(x, ws, wt):
    wq, wk, wv, wo = ws
    h = layer_norm(x, -1)
    x = x + jnp.einsum("btshe,hed->btsd", mha(heads(h, wq), heads(h, wk), heads(h, wv)), wo)
    x = lax.with_sharding_constraint(x, NamedSharding(M15, P(None, None, "sp")))
    wq, wk, wv, wo = wt
    h = layer_norm(x, -1)
    q, k, v = (jnp.swapaxes(heads(h, w_), 1, 2) for w_ in (wq, wk, wv))
    o = jnp.swapaxes(mha(q, k, v), 1, 2)
    y = x + jnp.einsum("btshe,hed->btsd", o, wo)
    return lax.with_sharding_constraint(y, NamedSharding(M15, P(None, "sp")))


C.gspmd("g.divided_attn_wsc_layout_switch.sp4", {"sp": NSP}, (P(None, "sp"), P(), P()), P(None, "sp"),
        divided_wsc, (X5, WS5, WT5))

# 16. TSM (bf16) of 6. with time over sp4
C.gspmd("g.tsm_shift_bf16_time_sharded.sp4", {"sp": NSP}, (P(None, "sp"), P()), P(None, "sp"), tsm,
        (R(B, T, 2, 2, C6, dt=jnp.bfloat16), R(C6, C6, scale=0.2, dt=jnp.bfloat16)))

# 17. per-clip GroupNorm followed by per-frame LayerNorm, time over sp8
C.gspmd("g.clip_groupnorm_then_frame_norm.sp8", {"sp": 8}, (P(None, "sp"), P(), P()), P(None, "sp"),
        lambda x, g, b: frame_norm(clip_groupnorm(x, g, b), g, b), (X11, 1.0 + R(C11, scale=0.2), R(C11, scale=0.2)))

# 18. a training step of the diffusion temporal block of 10. (epsilon MSE
#     against a target) with heads over tp, batch over dp, optax.adamw
OPT18 = optax.adamw(1e-2, weight_decay=0.05)
P18 = dict(zip(["wada", "wq", "wk", "wv", "wo", "table"], TB10[2:]))
SPEC18 = {"wada": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp"), "table": P("tp")}
S18 = OPT18.init(P18)
SS18 = state_specs(S18, SPEC18)


def diff_step(p, s, x, temb, eps):
    def loss(p):
        out = temporal_block(x, temb, p["wada"], p["wq"], p["wk"], p["wv"], p["wo"], p["table"])
        return jnp.mean(jnp.square(out - eps))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT18.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.diffusion_temporal_block_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC18, SS18, P("dp"), P("dp"), P("dp")),
        (SPEC18, SS18, P()), diff_step, (P18, S18, TB10[0], TB10[1], R(4, T10, S10, D10)))

# 19. the photometric warp loss of 9. with time over sp4
C.gspmd("g.flow_warp_photometric_time_sharded.sp4", {"sp": NSP}, (P(None, "sp"), P(None, "sp")), P(),
        photo_loss, (R(B, T9, H9, W9, C9), I(-2, 3, B, T9, H9, W9, 2)))

# 20. the ViViT tubelet embedding of 3. (strided Conv3d) with time over sp4
C.gspmd("g.vivit_tubelet_conv3d_time_sharded.sp4", {"sp": NSP}, (P(None, "sp"), P(), P(), P()), P(None, "sp"),
        tubelet_embed, (R(2, TB, HB, WB, C3), R(2, 4, 4, C3, D3, scale=0.1), R(D3, scale=0.1), R(NTOK, D3, scale=0.5)))

# ---------------------------------------------------------------------------
# 13. bidirectional temporal conv: a causal conv plus an anti-causal one
#     computed as flip -> causal conv -> flip; time over sp4, the flip by a
#     ppermute i -> n - 1 - i and a local reverse.


def bidir_conv(x, wf, wb):
    return causal_conv(x, wf) + jnp.flip(causal_conv(jnp.flip(x, 1), wb), 1)


def bidir_sp(bug):
    def flip(a):
        if bug == "flip-local-only":
            return jnp.flip(a, 1)
        return jnp.flip(lax.ppermute(a, "sp", [(i, NSP - 1 - i) for i in range(NSP)]), 1)

    def cconv(a, w):
        halo = lax.ppermute(a[:, -2:], "sp", right(NSP))
        return conv3d(jnp.concatenate([halo, a], 1), w, [(0, 0), (1, 1), (1, 1)])

    def f(x, wf, wb):
        back = cconv(flip(x), wb)
        if bug == "flip-back-local":
            back = jnp.flip(back, 1)
        else:
            back = flip(back)
        return cconv(x, wf) + back
    return f


C.smap("s.bidirectional_conv_flip_ppermute.sp4", {"sp": NSP}, bidir_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       bidir_conv, (R(B, T, H, W, CH), R(3, 3, 3, CH, 4, scale=0.2), R(3, 3, 3, CH, 4, scale=0.2)),
       bugs=[("flip-local-only", ["wrong-permutation"]), ("flip-back-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 14. depthwise temporal conv (kernel 5, centred) on per-patch features
#     (b, t, s, c), time over sp4, the halo taken from the whole clip: all_gather
#     along time, zero-padded by 2 on each side, the device's window cut by
#     dynamic_slice at its first frame.
T14, S14, C14 = 16, 4, 8


def dw_temporal(x, w):
    xp = jnp.pad(x, ((0, 0), (2, 2), (0, 0), (0, 0)))
    return sum(xp[:, k:k + x.shape[1]] * w[k] for k in range(5))


def dw_temporal_sp(bug):
    def f(x, w):
        tl = x.shape[1]
        full = lax.all_gather(x, "sp", axis=1, tiled=True)
        if bug == "pad-front-only":
            fp = jnp.pad(full, ((0, 0), (4, 0), (0, 0), (0, 0)))
        else:
            fp = jnp.pad(full, ((0, 0), (2, 2), (0, 0), (0, 0)))
        src = full if bug == "slice-unpadded-clip" else fp
        win = lax.dynamic_slice_in_dim(src, idx("sp") * tl, tl + 4, 1)
        return sum(win[:, k:k + tl] * w[k] for k in range(5))
    return f


C.smap("s.depthwise_temporal_k5_gather_window.sp4", {"sp": NSP}, dw_temporal_sp, (P(None, "sp"), P()),
       P(None, "sp"), dw_temporal, (R(B, T14, S14, C14), R(5, C14, scale=0.5)),
       bugs=[("slice-unpadded-clip", ["wrong-offset"]), ("pad-front-only", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. TSM written with a reduce-scatter: each device places its frames of
#     the two shifted folds, moved one frame forward / back, into a
#     zero buffer of the whole clip (dynamic_update_slice at its global
#     offset), and psum_scatter along time hands every device its block.


def tsm_plain(x):
    a = jnp.pad(x[:, :-1, ..., :F6], ((0, 0), (1, 0), (0, 0), (0, 0), (0, 0)))
    b = jnp.pad(x[:, 1:, ..., F6:2 * F6], ((0, 0), (0, 1), (0, 0), (0, 0), (0, 0)))
    return jnp.concatenate([a, b, x[..., 2 * F6:]], -1)


def tsm_scatter(bug):
    def f(x):
        tl = x.shape[1]
        me = idx("sp")
        shape = (x.shape[0], NSP * tl + 2) + x.shape[2:4] + (F6,)
        fwd, bwd = (2, 0) if bug != "fold-offsets-swapped" else (0, 2)
        # buffer index = global frame + 1
        ba = lax.dynamic_update_slice_in_dim(jnp.zeros(shape, x.dtype), x[..., :F6], me * tl + fwd, 1)
        bb = lax.dynamic_update_slice_in_dim(jnp.zeros(shape, x.dtype), x[..., F6:2 * F6], me * tl + bwd, 1)
        buf = jnp.concatenate([ba, bb], -1)[:, 1:NSP * tl + 1]
        if bug == "psum-then-block-0":
            mine = psum(buf, "sp")[:, :tl]
        else:
            mine = lax.psum_scatter(buf, "sp", scatter_dimension=1, tiled=True)
        return jnp.concatenate([mine, x[..., 2 * F6:]], -1)
    return f


C.smap("s.tsm_shift_by_psum_scatter.sp4", {"sp": NSP}, tsm_scatter, (P(None, "sp"),), P(None, "sp"), tsm_plain,
       (R(B, T, 2, 2, C6),), bugs=[("fold-offsets-swapped", ["wrong-offset"]), ("psum-then-block-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 16. streaming causal normalisation: each frame minus the running mean of
#     the (spatially averaged) frames so far; time over sp4: a local cumsum
#     plus the exclusive prefix of the all_gather'd block totals, divided by
#     the global frame count t + 1.


def running_center(x):
    f = jnp.mean(x, (2, 3))  # (b, t, c)
    run = jnp.cumsum(f, 1) / jnp.arange(1, x.shape[1] + 1, dtype=x.dtype)[None, :, None]
    return x - run[:, :, None, None]


def running_center_sp(bug):
    def f(x):
        tl = x.shape[1]
        me = idx("sp")
        fr = jnp.mean(x, (2, 3))
        tot = lax.all_gather(jnp.sum(fr, 1), "sp")  # (n, b, c)
        before = (jnp.arange(NSP) <= me) if bug == "inclusive-prefix" else (jnp.arange(NSP) < me)
        pre = jnp.sum(jnp.where(before[:, None, None], tot, 0.0), 0)
        t0 = 0 if bug == "local-count" else me * tl
        cnt = (t0 + jnp.arange(1, tl + 1)).astype(x.dtype)
        run = (pre[:, None] + jnp.cumsum(fr, 1)) / cnt[None, :, None]
        return x - run[:, :, None, None]
    return f


C.smap("s.streaming_running_mean_prefix.sp4", {"sp": NSP}, running_center_sp, (P(None, "sp"),), P(None, "sp"),
       running_center, (X11,), bugs=[("inclusive-prefix", ["wrong-offset"]), ("local-count", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. frame-causal attention for autoregressive video generation: token
#     (t, s) attends to every token of frames <= t; tokens (b, t*s, d) with
#     frames over sp4; a ring of ppermutes carries k, v (and nothing else)
#     around inside lax.fori_loop, online softmax; the source block of step
#     j is (me - j) mod n.
T17, S17, D17 = 8, 4, 8


def frame_causal(q, k, v):
    fid = jnp.arange(q.shape[1]) // S17
    s = jnp.einsum("bqd,bkd->bqk", q, k) / np.sqrt(D17)
    s = jnp.where(fid[:, None] >= fid[None, :], s, -1e30)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)


def frame_causal_ring(bug):
    def f(q, k, v):
        me = idx("sp")
        L = q.shape[1]
        qf = (me * L + jnp.arange(L)) // S17

        def body(j, c):
            m, l, acc, kk, vv = c
            src = (me + j) % NSP if bug == "source-index-ahead" else (me - j) % NSP
            kf = (src * L + jnp.arange(L)) // S17
            if bug == "key-frames-local":
                kf = jnp.arange(L) // S17 + me * L // S17
            s = jnp.einsum("bqd,bkd->bqk", q, kk) / np.sqrt(D17)
            s = jnp.where(qf[:, None] >= kf[None, :], s, -1e30)
            mn = jnp.maximum(m, jnp.max(s, -1))
            p = jnp.exp(s - mn[..., None])
            a = jnp.exp(m - mn)
            acc = acc * a[..., None] + jnp.einsum("bqk,bkd->bqd", p, vv)
            l = l * a + jnp.sum(p, -1)
            perm = [(i, (i + 1) % NSP) for i in range(NSP)]
            return mn, l, acc, lax.ppermute(kk, "sp", perm), lax.ppermute(vv, "sp", perm)
        m0 = jnp.full(q.shape[:2], -1e30, q.dtype)
        _, l, acc, _, _ = lax.fori_loop(0, NSP, body, (m0, jnp.zeros(q.shape[:2], q.dtype), jnp.zeros_like(q), k, v))
        return acc / l[..., None]
    return f


X17 = tuple(R(2, T17 * S17, D17) for _ in range(3))
C.smap("s.frame_causal_ring_attention_fori.sp4", {"sp": NSP}, frame_causal_ring, (P(None, "sp"),) * 3,
       P(None, "sp"), frame_causal, X17,
       bugs=[("source-index-ahead", ["wrong-offset"]), ("key-frames-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. causal VAE decoder temporal upsampling: depth-to-time (2c channels ->
#     2 frames of c), then the causal 3-D conv of 1.; time over sp4; the
#     halo is the left neighbour's last frame BEFORE upsampling (one frame
#     that becomes the two frames the conv needs).


def d2t(x):
    b, t, h, w, c = x.shape
    return x.reshape(b, t, h, w, 2, c // 2).transpose(0, 1, 4, 2, 3, 5).reshape(b, 2 * t, h, w, c // 2)


def vae_up(x, w):
    return causal_conv(d2t(x), w)


def vae_up_sp(bug):
    def f(x, w):
        if bug == "halo-from-right":
            pre = lax.ppermute(x[:, :1], "sp", left(NSP))
        else:
            pre = lax.ppermute(x[:, -1:], "sp", right(NSP))
        halo = d2t(pre)
        if bug == "halo-frames-reversed":
            halo = jnp.flip(halo, 1)
        return conv3d(jnp.concatenate([halo, d2t(x)], 1), w, [(0, 0), (1, 1), (1, 1)])
    return f


C.smap("s.causal_vae_depth_to_time_upsample.sp4", {"sp": NSP}, vae_up_sp, (P(None, "sp"), P()), P(None, "sp"),
       vae_up, (R(B, 8, H, W, 8), R(3, 3, 3, 4, 4, scale=0.2)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("halo-frames-reversed", ["wrong-offset"])])

# GSPMD: 19. the bidirectional conv of 13.; 20. the depth-to-time upsampling
# + causal conv of 18.; 21. the streaming running-mean normalisation of 16.
# (cumsum along the sharded time axis); 22. the frame-causal attention of 17.
C.gspmd("g.bidirectional_conv_flip.sp4", {"sp": NSP}, (P(None, "sp"), P(), P()), P(None, "sp"), bidir_conv,
        (R(B, T, H, W, CH), R(3, 3, 3, CH, 4, scale=0.2), R(3, 3, 3, CH, 4, scale=0.2)))
C.gspmd("g.vae_depth_to_time_causal_conv.sp4", {"sp": NSP}, (P(None, "sp"), P()), P(None, "sp"), vae_up,
        (R(B, 8, H, W, 8), R(3, 3, 3, 4, 4, scale=0.2)))
C.gspmd("g.streaming_running_mean_cumsum.sp4", {"sp": NSP}, (P(None, "sp"),), P(None, "sp"), running_center, (X11,))
C.gspmd("g.frame_causal_attention.sp4", {"sp": NSP}, (P(None, "sp"),) * 3, P(None, "sp"), frame_causal, X17)

# ---------------------------------------------------------------------------
# 19. the causal conv of 1. written with a CYCLIC ppermute (every device
#     sends its last two frames to the next, the last device's wrap around
#     to device 0) whose wrapped halo device 0 then zeroes by a where on
#     axis_index.


def causal_cyclic_sp(bug):
    def f(x, w):
        me = idx("sp")
        halo = lax.ppermute(x[:, -2:], "sp", [(i, (i + 1) % NSP) for i in range(NSP)])
        drop = (me == NSP - 1) if bug == "zero-on-last-device" else (me == 0)
        halo = jnp.where(drop, jnp.zeros_like(halo), halo)
        return conv3d(jnp.concatenate([halo, x], 1), w, [(0, 0), (1, 1), (1, 1)])
    return f


C.smap("s.causal_conv3d_cyclic_halo_masked.sp4", {"sp": NSP}, causal_cyclic_sp, (P(None, "sp"), P()),
       P(None, "sp"), causal_conv, (R(B, T, H, W, CH), R(3, 3, 3, CH, 8, scale=0.2)),
       bugs=[("zero-on-last-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 20. time-reversal consistency: a per-frame 1x1 mix of the reversed clip;
#     time over sp4, the reversal by an untiled all_gather (n, b, t/n, ...)
#     indexed at n - 1 - me and a local flip.


def reversed_mix(x, w):
    return jnp.einsum("bthwc,cd->bthwd", jnp.flip(x, 1), w)


def reversed_mix_sp(bug):
    def f(x, w):
        allb = lax.all_gather(x, "sp")  # (n, b, t/n, h, w, c)
        k = idx("sp") if bug == "block-of-self" else NSP - 1 - idx("sp")
        blk = lax.dynamic_index_in_dim(allb, k, 0, keepdims=False)
        if bug != "no-local-flip":
            blk = jnp.flip(blk, 1)
        return jnp.einsum("bthwc,cd->bthwd", blk, w)
    return f


C.smap("s.time_reversal_untiled_gather_index.sp4", {"sp": NSP}, reversed_mix_sp, (P(None, "sp"), P()),
       P(None, "sp"), reversed_mix, (R(B, T, H, W, CH), R(CH, 6, scale=0.5)),
       bugs=[("block-of-self", ["wrong-offset"]), ("no-local-flip", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 21. centred temporal conv with replicate ("edge") padding of the clip:
#     halos of one frame from each neighbour, the clip's first / last device
#     repeating its own edge frame (where on axis_index).


def edge_conv(x, w):
    xp = jnp.pad(x, ((0, 0), (1, 1), (0, 0), (0, 0), (0, 0)), mode="edge")
    return conv3d(xp, w, [(0, 0), (1, 1), (1, 1)])


def edge_conv_sp(bug):
    def f(x, w):
        me = idx("sp")
        lo = lax.ppermute(x[:, -1:], "sp", right(NSP))
        hi = lax.ppermute(x[:, :1], "sp", left(NSP))
        if bug != "zero-edges":
            lo = jnp.where(me == 0, x[:, :1], lo)
            edge_dev = 0 if bug == "last-edge-on-device-0" else NSP - 1
            hi = jnp.where(me == edge_dev, x[:, -1:], hi)
        return conv3d(jnp.concatenate([lo, x, hi], 1), w, [(0, 0), (1, 1), (1, 1)])
    return f


C.smap("s.edge_padded_temporal_conv_halos.sp4", {"sp": NSP}, edge_conv_sp, (P(None, "sp"), P()), P(None, "sp"),
       edge_conv, (R(B, T, H, W, CH) + 1.0, R(3, 3, 3, CH, 4, scale=0.2)),
       bugs=[("zero-edges", ["wrong-offset"]), ("last-edge-on-device-0", ["wrong-offset"])])

# GSPMD: 23. the edge-padded conv of 21.; 24. a cyclic temporal roll
# (augmentation) followed by the reversed mix of 20.
C.gspmd("g.edge_padded_temporal_conv.sp4", {"sp": NSP}, (P(None, "sp"), P()), P(None, "sp"), edge_conv,
        (R(B, T, H, W, CH) + 1.0, R(3, 3, 3, CH, 4, scale=0.2)))
C.gspmd("g.roll_then_reversed_mix.sp4", {"sp": NSP}, (P(None, "sp"), P()), P(None, "sp"),
        lambda x, w: reversed_mix(jnp.roll(x, 3, 1), w), (R(B, T, H, W, CH), R(CH, 6, scale=0.5)))

C.finish()
