"""samples/fresh103: a 103rd batch of programs as a user writes them, on the theme of speech and audio models in JAX (Whisper and wav2vec2 front ends, Transformer-XL relative attention, CTC training with optax, streaming encoders with carried state, HiFi-GAN upsampling, PCEN), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Whisper log-mel with the signal over sp4: centre reflect padding, frames
    cut by a strided conv with an identity kernel, periodic Hann, |rfft|^2,
    the last frame dropped, mel matmul, log10(max(., 1e-10)), the clamp to
    the utterance's global maximum minus 8 (pmax), (x + 4) / 4. Each block
    needs 4 samples of its left neighbour (device 0 reflects). Bugs: device
    0 zero-padded, the halo from the right neighbour, the local maximum.
 2. wav2vec2 conv feature extractor with time over sp4: conv (k4, s2) on
    the signal zero-padded by 2 at the end (a 2-sample right halo), GroupNorm
    with one group per channel over the global time axis (psum'd), GELU, a
    second conv (k2, s2), LayerNorm + projection. Bugs: cyclic halo, local
    statistics, the halo from the left neighbour.
 3. a conformer depthwise time conv (k5 centred, lax.conv feature groups)
    on sp4 x tp2 with channels over tp (kernel passed whole, sliced at the
    tp offset), halos of 2 both ways, swish, row-parallel pointwise conv
    psum'd over tp. Bugs: kernel sliced at 0, cyclic halos, halos 1 / 3.
 4. Transformer-XL relative attention (content bias u, position bias v,
    sinusoidal relative embeddings, the pad-reshape rel_shift, causal) with
    heads over tp4 and batch over dp2. Bugs: u, v sliced at head 0, output
    not psum'd, psum over dp.
 5. a CTC training step with optax.ctc_loss (logit and label paddings)
    under dp4: loss = sum of losses / global label count, gradients psum'd,
    optax.sgd with momentum. Bugs: gradients pmean'd, local label count.
 6. Whisper cross-attention (q, k scaled by dh^-1/4, k without bias) with 8
    heads over tp4, batch over dp2, output bias added once after the psum.
    Bugs: bias before the psum, scale from the local width, psum over dp.
 7. a streaming encoder step with carried state, time over sp4: causal
    depthwise conv whose first cache comes in as an input (device 0) and
    from the left neighbour otherwise, then a leaky integrator
    h = a h + (1 - a) y by a local lax.scan plus the incoming state
    a^(t+1) s_d from all_gather'd block end states; returns the outputs,
    the final state and the new conv cache. Bugs: carry without decay, an
    inclusive prefix, the input cache ignored.
 8. HiFi-GAN upsampling with time over sp4: ConvTranspose1d (k4, s2, p1) as
    a conv with lhs_dilation on a block with halos of 1, leaky ReLU, a
    dilated residual conv (k3, d2, halos of 2). Bugs: no right halo, the
    output window shifted by one, cyclic residual halos.
 9. SpecAugment with masks from jax.random.fold_in on the global utterance
    index, batch over dp4, masks kept inside each utterance's length, then
    per-utterance CMVN over valid frames. Bugs: local index, the dp index.
10. a macaron conformer block training step (half FF, MHSA, half FF, final
    LayerNorm) on dp2 x tp4 with check_vma=True, loss pmean'd over dp,
    optax.sgd (nesterov) + decayed weights. Bugs: loss not pmean'd
    (gradients doubled), FF1's half applied twice.
11. Whisper encoder stem with time over sp4: conv k3 p1, GELU, conv k3 s2
    p1, GELU, sinusoidal positions sliced at the global frame offset.
    Bugs: positions at offset 0, conv2's halo from the right, conv1 without
    halos.
12. mel filterbank with the frequency bins over tp4 (filterbank passed
    whole, sliced) psum'd, then PCEN with a lax.scan smoother, batch over
    dp2. Bugs: PCEN before the psum, filterbank rows at offset 0.
13. a hand-written CTC forward algorithm in log space (lax.scan, blank 0,
    skip transitions where labels differ, label padding and frame masks)
    with jax.value_and_grad, batch over dp4, loss and gradient psum'd.
    Bugs: local mean (gradient 4x), loss pmean'd.
14. bf16 power spectra, filterbank with frequency over tp4 (f32
    accumulation), partial mels psum_scatter'd over the mel axis, log(. +
    eps), all_gather'd back in bf16; batch over dp2. Bugs: log before the
    reduce-scatter, eps added to every partial. A second correct body
    scatters and gathers over time instead.
15. chunked streaming attention (4-frame chunks over sp4, each chunk sees
    itself causally and the 2 frames before it: the left neighbour's or,
    on device 0, the incoming cache). Bugs: cache from the right, zeros
    on device 0, no left context.
16. iSTFT overlap-add with the frames over sp4 (frame 8, hop 4, Hann
    synthesis window, centre trim, length 64): the baseline scatter-adds
    (.at[].add), the body adds half-frame blocks and gets the next
    device's first half-frame by ppermute; the window-square sum is a
    constant sliced at the global offset. Bugs: the half-frame sent
    right, a cyclic send (the last device adds device 0's), the window sum
    sliced at offset 0.
17. a Whisper decoder self-attention decoding step against a KV cache
    (dynamic_update_slice at the step position, mask pos <= step), heads
    over tp4, batch over dp2. Bugs: position plus the tp rank, output not
    psum'd, output bias inside the psum.
18. a second correct body of family 1: frames from hop-sized blocks of
    the haloed signal (reshape + concat of neighbouring blocks, no conv),
    device 0's reflect padding chosen by lax.cond on axis_index.
19. a bf16 conformer feed-forward half with the hidden width over tp4, the
    row-parallel partials psum'd in bf16, batch over dp2. Bugs: psum over
    dp, the 0.5 applied inside and outside.
GSPMD pairs (correct): Whisper log-mel over sp4; wav2vec2 extractor over
sp4; Whisper cross-attention dp2 x tp4; CTC training step dp4; HiFi-GAN
upsampler over sp4; conformer training step dp2 x tp4; Whisper encoder
stem over sp4; SpecAugment dp4; the streaming leaky integrator over sp4;
filterbank + PCEN dp2 x tp4; the hand-written CTC with its gradient dp4;
the iSTFT overlap-add over sp4; the KV-cache decoding step dp2 x tp4.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh103.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh103.py"
C = Corpus("samples/fresh103", SCRIPT, "samples/gen/run_fresh103.sh", sys.argv[1:])
rng, R, I = seeded(10303)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def right_perm(n, cyclic=False):  # i -> i + 1 (data flows right: left halo)
    return [(i, (i + 1) % n) for i in range(n if cyclic else n - 1)]


def left_perm(n, cyclic=False):  # i -> i - 1 (data flows left: right halo)
    return [(i, (i - 1) % n) for i in range(1 if not cyclic else 0, n)]


def mel_fb(nfreq, nmel):
    """A triangular filterbank (nfreq, nmel) on a linear grid (tiny sizes)."""
    c = np.linspace(0, nfreq - 1, nmel + 2)
    f = np.arange(nfreq)[:, None]
    lo, mid, hi = c[None, :-2], c[None, 1:-1], c[None, 2:]
    return np.maximum(0, np.minimum((f - lo) / (mid - lo), (hi - f) / (hi - mid))).astype(np.float32)


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def layer_norm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps) * g + b


# ---------------------------------------------------------------------------
# 1. Whisper log-mel, signal over sp4
NFFT, HOP = 8, 4
WIN = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(NFFT) / NFFT)).astype(np.float32)
FB1 = mel_fb(NFFT // 2 + 1, 4)
EYE = np.eye(NFFT, dtype=np.float32)[:, None, :]  # (O, I, W)


def frames_conv(x):  # x (b, t) -> (b, nframes, NFFT)
    y = lax.conv_general_dilated(x[:, None, :], EYE, (HOP,), "VALID", dimension_numbers=("NCH", "OIH", "NCH"))
    return jnp.transpose(y, (0, 2, 1))


def mel_from_frames(fr, fb):
    spec = jnp.abs(jnp.fft.rfft(fr * WIN, axis=-1)) ** 2
    mel = spec @ fb
    return jnp.log10(jnp.maximum(mel, 1e-10))


def whisper_logmel(x, fb):
    xp = jnp.pad(x, ((0, 0), (NFFT // 2, NFFT // 2)), mode="reflect")
    l = mel_from_frames(frames_conv(xp)[:, :-1], fb)
    l = jnp.maximum(l, l.max(axis=(1, 2), keepdims=True) - 8.0)
    return (l + 4.0) / 4.0


def whisper_logmel_sp(bug):
    def f(x, fb):
        n = 4
        me = idx("sp")
        if bug == "halo-from-right":
            halo = lax.ppermute(x[:, :HOP], "sp", left_perm(n))
        else:
            halo = lax.ppermute(x[:, -HOP:], "sp", right_perm(n))
        refl = x[:, HOP:0:-1]
        if bug != "device0-zero-pad":
            halo = jnp.where(me == 0, refl, halo)
        l = mel_from_frames(frames_conv(jnp.concatenate([halo, x], 1)), fb)
        top = l.max(axis=(1, 2), keepdims=True)
        if bug != "local-max":
            top = pmax(top, "sp")
        l = jnp.maximum(l, top - 8.0)
        return (l + 4.0) / 4.0
    return f


def speechy(b, t, quiet_from):
    x = R(b, t)
    x[:, quiet_from:] *= 1e-5  # trailing near-silence so the -8 clamp bites
    return x


X1 = speechy(2, 64, 36)
C.smap("s.whisper_logmel_reflect_halo_globalmax.sp4", {"sp": 4}, whisper_logmel_sp, (P(None, "sp"), P()),
       P(None, "sp"), whisper_logmel, (X1, FB1),
       bugs=[("device0-zero-pad", ["wrong-halo"]), ("halo-from-right", ["wrong-permutation"]),
             ("local-max", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. wav2vec2 conv feature extractor, time over sp4
C2, D2 = 8, 6


def conv1d(x, w, stride=1, pad="VALID", dil=1, lhs_dil=1):
    return lax.conv_general_dilated(x, w, (stride,), pad, lhs_dilation=(lhs_dil,), rhs_dilation=(dil,),
                                    dimension_numbers=("NCH", "OIH", "NCH"))


def w2v_tail(h, p):
    h = gelu(conv1d(h, p["w1"], 2))
    h = jnp.transpose(h, (0, 2, 1))
    return layer_norm(h, p["ln_g"], p["ln_b"]) @ p["proj"]


def w2v_ref(x, p):
    xp = jnp.pad(x, ((0, 0), (0, 2)))[:, None]
    h = conv1d(xp, p["w0"], 2)  # (b, c, 32)
    m = h.mean(-1, keepdims=True)
    v = jnp.mean(jnp.square(h - m), -1, keepdims=True)
    h = (h - m) * lax.rsqrt(v + 1e-5) * p["gn_g"][:, None] + p["gn_b"][:, None]
    return w2v_tail(gelu(h), p)


def w2v_sp(bug):
    def f(x, p):
        n = 4
        if bug == "halo-from-left":
            halo = lax.ppermute(x[:, -2:], "sp", right_perm(n))
        else:
            halo = lax.ppermute(x[:, :2], "sp", left_perm(n, cyclic=bug == "cyclic-halo"))
        h = conv1d(jnp.concatenate([x, halo], 1)[:, None], p["w0"], 2)  # (b, c, 8)
        cnt = h.shape[-1] * (1 if bug == "local-stats" else n)
        red = (lambda a: a) if bug == "local-stats" else (lambda a: psum(a, "sp"))
        m = red(h.sum(-1, keepdims=True)) / cnt
        v = red(jnp.square(h - m).sum(-1, keepdims=True)) / cnt
        h = (h - m) * lax.rsqrt(v + 1e-5) * p["gn_g"][:, None] + p["gn_b"][:, None]
        return w2v_tail(gelu(h), p)
    return f


P2 = {"w0": R(C2, 1, 4, scale=0.5), "gn_g": 1 + R(C2, scale=0.1), "gn_b": R(C2, scale=0.1),
      "w1": R(C2, C2, 2, scale=0.3), "ln_g": 1 + R(C2, scale=0.1), "ln_b": R(C2, scale=0.1),
      "proj": R(C2, D2, scale=0.3)}
X2 = R(2, 64)
C.smap("s.wav2vec2_featextract_groupnorm_righthalo.sp4", {"sp": 4}, w2v_sp, (P(None, "sp"), P()),
       P(None, "sp"), w2v_ref, (X2, P2),
       bugs=[("cyclic-halo", ["wrong-halo"]), ("local-stats", ["missing-collective"]),
             ("halo-from-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 3. conformer depthwise conv, sp4 x tp2 (channels over tp)
C3 = 8


def dwconv(x, w):  # x (b, t, c) -> same length ("VALID" on an already padded x), w (k, c)
    y = lax.conv_general_dilated(jnp.transpose(x, (0, 2, 1)), jnp.transpose(w)[:, None, :], (1,), "VALID",
                                 dimension_numbers=("NCH", "OIH", "NCH"), feature_group_count=x.shape[-1])
    return jnp.transpose(y, (0, 2, 1))


def conformer_dw_ref(x, w, b, wp):
    y = dwconv(jnp.pad(x, ((0, 0), (2, 2), (0, 0))), w) + b
    return jax.nn.swish(y) @ wp


def conformer_dw_sp(bug):
    def f(x, w, b, wp):
        n, cl = 4, x.shape[-1]
        off = 0 if bug == "kernel-offset0" else idx("tp") * cl
        wl = lax.dynamic_slice_in_dim(w, off, cl, 1)
        cyc = bug == "cyclic-halos"
        nl, nr = (1, 3) if bug == "halos-1-3" else (2, 2)
        left = lax.ppermute(x[:, -nl:], "sp", right_perm(n, cyc))
        right = lax.ppermute(x[:, :nr], "sp", left_perm(n, cyc))
        y = dwconv(jnp.concatenate([left, x, right], 1), wl) + b
        return psum(jax.nn.swish(y) @ wp, "tp")
    return f


C.smap("s.conformer_dwconv_k5_chan_tp_time_sp.sp4xtp2", {"sp": 4, "tp": 2}, conformer_dw_sp,
       (P(None, "sp", "tp"), P(), P("tp"), P("tp", None)), P(None, "sp", None), conformer_dw_ref,
       (R(2, 32, C3), R(5, C3, scale=0.4), R(C3, scale=0.1), R(C3, C3, scale=0.3)),
       bugs=[("kernel-offset0", ["wrong-offset"]), ("cyclic-halos", ["wrong-halo"]),
             ("halos-1-3", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 4. Transformer-XL relative attention, heads over tp4, batch over dp2
T4, D4, H4, E4 = 8, 16, 4, 4


def sinusoid(pos, d):
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    a = pos[:, None] * inv[None]
    return np.concatenate([np.sin(a), np.cos(a)], -1).astype(np.float32)


REL4 = sinusoid(np.arange(T4 - 1, -1, -1, dtype=np.float64), D4)  # (klen, d)


def rel_shift(s):  # (..., q, k)
    *lead, q, k = s.shape
    s = jnp.pad(s, [(0, 0)] * len(lead) + [(0, 0), (1, 0)])
    s = s.reshape(*lead, k + 1, q)[..., 1:, :]
    return s.reshape(*lead, q, k)


def xl_attn(x, wq, wk, wv, wr, u, v, wo):
    b, t, _ = x.shape
    h = wq.shape[1] // E4
    q = (x @ wq).reshape(b, t, h, E4)
    k = (x @ wk).reshape(b, t, h, E4)
    vv = (x @ wv).reshape(b, t, h, E4)
    r = (REL4 @ wr).reshape(t, h, E4)
    ac = jnp.einsum("bihe,bjhe->bhij", q + u, k)
    bd = rel_shift(jnp.einsum("bihe,jhe->bhij", q + v, r))
    s = (ac + bd) / np.sqrt(E4)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    o = jnp.einsum("bhij,bjhe->bihe", jax.nn.softmax(s, -1), vv).reshape(b, t, h * E4)
    return o @ wo


def xl_attn_ref(x, wq, wk, wv, wr, u, v, wo):
    return xl_attn(x, wq, wk, wv, wr, u, v, wo)


def xl_attn_tp(bug):
    def f(x, wq, wk, wv, wr, u, v, wo):
        hl = wq.shape[1] // E4
        off = 0 if bug == "uv-head0" else idx("tp") * hl
        ul, vl = (lax.dynamic_slice_in_dim(a, off, hl, 0) for a in (u, v))
        o = xl_attn(x, wq, wk, wv, wr, ul, vl, wo)
        if bug == "no-psum":
            return o
        return psum(o, "dp" if bug == "psum-dp" else "tp")
    return f


col = P(None, "tp")
C.smap("s.transformerxl_relshift_attn_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, xl_attn_tp,
       (P("dp"), col, col, col, col, P(), P(), P("tp", None)), P("dp"), xl_attn_ref,
       (R(4, T4, D4), R(D4, D4, scale=0.3), R(D4, D4, scale=0.3), R(D4, D4, scale=0.3), R(D4, D4, scale=0.3),
        R(H4, E4, scale=0.3), R(H4, E4, scale=0.3), R(D4, D4, scale=0.3)),
       bugs=[("uv-head0", ["wrong-offset"]), ("no-psum", ["missing-collective"]),
             ("psum-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. CTC training step with optax.ctc_loss, dp4
B5, T5, F5, V5, L5 = 8, 12, 6, 5, 4
OPT5 = optax.sgd(0.1, momentum=0.9)


def ctc_sum(p, feats, lpad, labels, yp):
    logits = jnp.tanh(feats @ p["w1"]) @ p["w2"] + p["b2"]
    return optax.ctc_loss(logits, lpad, labels, yp, blank_id=0).sum()


def ctc_step_ref(p, s, feats, lpad, labels, yp):
    den = jnp.sum(1.0 - yp)
    loss, g = jax.value_and_grad(lambda q: ctc_sum(q, feats, lpad, labels, yp) / den)(p)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def ctc_step_dp(bug):
    def f(p, s, feats, lpad, labels, yp):
        den = jnp.sum(1.0 - yp)
        if bug != "local-label-count":
            den = psum(den, "dp")
        loss, g = jax.value_and_grad(lambda q: ctc_sum(q, feats, lpad, labels, yp) / den)(p)
        red = pmean if bug == "grads-pmean" else psum
        g = jax.tree.map(lambda a: red(a, "dp"), g)
        loss = psum(loss, "dp")
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return f


P5 = {"w1": R(F5, 8, scale=0.5), "w2": R(8, V5, scale=0.5), "b2": R(V5, scale=0.1)}
S5 = jax.tree.map(np.asarray, OPT5.init(P5))
S5 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.01) if a.ndim else a, S5)
LEN5 = I(8, T5 + 1, B5)
LPAD5 = (np.arange(T5)[None] >= LEN5[:, None]).astype(np.float32)
YLEN5 = I(1, L5 + 1, B5)
YPAD5 = (np.arange(L5)[None] >= YLEN5[:, None]).astype(np.float32)
LAB5 = I(1, V5, B5, L5)
dp = P("dp")
C.smap("s.ctc_optax_train_step_label_count.dp4", {"dp": 4}, ctc_step_dp, (P(), P(), dp, dp, dp, dp), (P(), P(), P()),
       ctc_step_ref, (P5, S5, R(B5, T5, F5), LPAD5, LAB5, YPAD5),
       bugs=[("grads-pmean", ["wrong-reduction"]), ("local-label-count", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. Whisper cross-attention, 8 heads over tp4, batch over dp2
D6, H6, E6 = 16, 8, 2


def xattn(x, enc, p, scale_w=E6):
    b, s, _ = x.shape
    t = enc.shape[1]
    h = p["wq"].shape[1] // E6
    xn = layer_norm(x, p["g"], p["b"])
    sc = scale_w ** -0.25
    q = ((xn @ p["wq"] + p["bq"]) * sc).reshape(b, s, h, E6)
    k = ((enc @ p["wk"]) * sc).reshape(b, t, h, E6)
    v = (enc @ p["wv"] + p["bv"]).reshape(b, t, h, E6)
    a = jax.nn.softmax(jnp.einsum("bshe,bthe->bhst", q, k), -1)
    return jnp.einsum("bhst,bthe->bshe", a, v).reshape(b, s, h * E6) @ p["wo"]


def xattn_ref(x, enc, p):
    return x + xattn(x, enc, p) + p["bo"]


def xattn_tp(bug):
    def f(x, enc, p):
        o = xattn(x, enc, p, scale_w=p["wq"].shape[1] if bug == "scale-local-width" else E6)
        if bug == "bias-before-psum":
            return x + psum(o + p["bo"], "tp")
        return x + psum(o, "dp" if bug == "psum-dp" else "tp") + p["bo"]
    return f


P6 = {"g": 1 + R(D6, scale=0.1), "b": R(D6, scale=0.1), "wq": R(D6, D6, scale=0.3), "bq": R(D6, scale=0.1),
      "wk": R(D6, D6, scale=0.3), "wv": R(D6, D6, scale=0.3), "bv": R(D6, scale=0.1), "wo": R(D6, D6, scale=0.3),
      "bo": R(D6, scale=0.1)}
SP6 = {"g": P(), "b": P(), "wq": col, "bq": P("tp"), "wk": col, "wv": col, "bv": P("tp"), "wo": P("tp", None),
       "bo": P()}
C.smap("s.whisper_cross_attn_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, xattn_tp, (dp, dp, SP6), dp, xattn_ref,
       (R(4, 4, D6), R(4, 8, D6), P6),
       bugs=[("bias-before-psum", ["wrong-reduction"]), ("scale-local-width", ["wrong-scale"]),
             ("psum-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. streaming encoder step with carried state, time over sp4


def leaky(y, a, h0):
    def step(h, yt):
        h = a * h + (1 - a) * yt
        return h, h
    hT, hs = lax.scan(step, h0, jnp.swapaxes(y, 0, 1))
    return jnp.swapaxes(hs, 0, 1), hT


def stream_ref(x, a, h0, cache, w):
    xc = jnp.concatenate([cache, x], 1)
    y = jnp.tanh(dwconv(xc, w))
    hs, hT = leaky(y, a, h0)
    return hs, hT, x[:, -2:]


def stream_sp(bug):
    def f(x, a, h0, cache, w):
        n, tl = 4, x.shape[1]
        me = idx("sp")
        left = lax.ppermute(x[:, -2:], "sp", right_perm(n))
        if bug != "cache-ignored":
            left = jnp.where(me == 0, cache, left)
        y = jnp.tanh(dwconv(jnp.concatenate([left, x], 1), w))
        hl, e = leaky(y, a, jnp.zeros_like(h0))
        ends = lax.all_gather(e, "sp")  # (n, b, c)
        an = a ** tl
        j = jnp.arange(n)

        def incoming(d, incl):
            s = (an ** d) * h0
            w_ = jnp.where((j <= d) if incl else (j < d), 1.0, 0.0)
            pw = jnp.maximum(d - 1 - j, 0).astype(jnp.float32)
            return s + jnp.sum(w_[:, None, None] * (an[None, None] ** pw[:, None, None]) * ends, 0)
        s = incoming(me, bug == "inclusive-prefix")
        if bug == "carry-no-decay":
            hs = hl + s[:, None]
        else:
            hs = hl + a ** (jnp.arange(tl) + 1.0)[:, None] * s[:, None]
        hT = incoming(n, False)
        last = lax.all_gather(x[:, -2:], "sp")[n - 1]
        return hs, hT, last
    return f


C7 = 4
A7 = (0.6 + 0.35 * rng.random(C7)).astype(np.float32)
C.smap("s.streaming_causalconv_leaky_state_carry.sp4", {"sp": 4}, stream_sp,
       (P(None, "sp"), P(), P(), P(), P()), (P(None, "sp"), P(), P()), stream_ref,
       (R(2, 32, C7), A7, R(2, C7), R(2, 2, C7), R(3, C7, scale=0.5)),
       bugs=[("carry-no-decay", ["wrong-scale"]), ("inclusive-prefix", ["wrong-offset"]),
             ("cache-ignored", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 8. HiFi-GAN upsampler, time over sp4 (NCH, time last)


def convT(x, w):  # torch ConvTranspose1d(k4, s2, p1); w (I, O, K)
    wf = jnp.transpose(jnp.flip(w, -1), (1, 0, 2))
    return conv1d(x, wf, 1, ((2, 2),), lhs_dil=2)


def lrelu(x):
    return jax.nn.leaky_relu(x, 0.1)


def hifi_ref(x, w, b, wr, br):
    y = lrelu(convT(x, w) + b[:, None])
    return y + conv1d(lrelu(y), wr, 1, ((2, 2),), dil=2) + br[:, None]


def hifi_sp(bug):
    def f(x, w, b, wr, br):
        n, tl = 4, x.shape[-1]
        left = lax.ppermute(x[..., -1:], "sp", right_perm(n))
        right = lax.ppermute(x[..., :1], "sp", left_perm(n))
        if bug == "no-right-halo":
            right = jnp.zeros_like(right)
        u = convT(jnp.concatenate([left, x, right], -1), w)  # global frames 2*tl*me - 2 ...
        st = 1 if bug == "window-shift" else 2
        y = lrelu(u[..., st:st + 2 * tl] + b[:, None])
        z = lrelu(y)
        cyc = bug == "cyclic-res-halo"
        zl = lax.ppermute(z[..., -2:], "sp", right_perm(n, cyc))
        zr = lax.ppermute(z[..., :2], "sp", left_perm(n, cyc))
        return y + conv1d(jnp.concatenate([zl, z, zr], -1), wr, 1, "VALID", dil=2) + br[:, None]
    return f


C8i, C8o = 6, 4
C.smap("s.hifigan_convtranspose_resblock_halos.sp4", {"sp": 4}, hifi_sp,
       (P(None, None, "sp"), P(), P(), P(), P()), P(None, None, "sp"), hifi_ref,
       (R(2, C8i, 16), R(C8i, C8o, 4, scale=0.4), R(C8o, scale=0.1), R(C8o, C8o, 3, scale=0.4), R(C8o, scale=0.1)),
       bugs=[("no-right-halo", ["wrong-halo"]), ("window-shift", ["wrong-offset"]),
             ("cyclic-res-halo", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 9. SpecAugment by fold_in on the global utterance index, dp4
T9, F9 = 16, 8


def specaug_one(key, i, feat, ln):
    k = jax.random.fold_in(key, i)
    k1, k2, k3, k4 = jax.random.split(k, 4)
    tw = jax.random.randint(k1, (), 1, 5)
    t0 = jax.random.randint(k2, (), 0, jnp.maximum(ln - tw, 1))
    fw = jax.random.randint(k3, (), 1, 3)
    f0 = jax.random.randint(k4, (), 0, F9 - fw)
    t = jnp.arange(T9)[:, None]
    fq = jnp.arange(F9)[None, :]
    m = ((t >= t0) & (t < t0 + tw)) | ((fq >= f0) & (fq < f0 + fw))
    valid = (t < ln).astype(feat.dtype)
    y = jnp.where(m, 0.0, feat) * valid
    cnt = ln.astype(feat.dtype)
    mu = y.sum(0) / cnt
    var = (jnp.square(y - mu) * valid).sum(0) / cnt
    return (y - mu) * lax.rsqrt(var + 1e-5) * valid


def specaug_ref(seed, feats, lens):
    key = jax.random.PRNGKey(seed)
    return jax.vmap(specaug_one, (None, 0, 0, 0))(key, jnp.arange(feats.shape[0]), feats, lens)


def specaug_dp(bug):
    def f(seed, feats, lens):
        key = jax.random.PRNGKey(seed)
        bl = feats.shape[0]
        if bug == "local-index":
            ii = jnp.arange(bl)
        elif bug == "dp-index-only":
            ii = jnp.full((bl,), idx("dp"))
        else:
            ii = idx("dp") * bl + jnp.arange(bl)
        return jax.vmap(specaug_one, (None, 0, 0, 0))(key, ii, feats, lens)
    return f


C.smap("s.specaugment_foldin_global_utt_cmvn.dp4", {"dp": 4}, specaug_dp, (P(), dp, dp), dp, specaug_ref,
       (np.int32(7), R(8, T9, F9), I(8, T9 + 1, 8)),
       bugs=[("local-index", ["wrong-offset"]), ("dp-index-only", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. macaron conformer block training step, dp2 x tp4, check_vma=True
D10, Hd10, H10, E10 = 8, 16, 4, 2
OPT10 = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.05, momentum=0.9, nesterov=True))


def ff(x, p, half_twice=False):
    h = jax.nn.swish(layer_norm(x, p["g"], 0.0) @ p["w1"]) @ p["w2"]
    return 0.5 * h if not half_twice else 0.25 * h


def mhsa(x, p):
    b, t, _ = x.shape
    h = p["wq"].shape[1] // E10
    xn = layer_norm(x, p["g"], 0.0)
    q, k, v = ((xn @ p[n]).reshape(b, t, h, E10) for n in ("wq", "wk", "wv"))
    a = jax.nn.softmax(jnp.einsum("bihe,bjhe->bhij", q, k) / np.sqrt(E10), -1)
    return jnp.einsum("bhij,bjhe->bihe", a, v).reshape(b, t, h * E10) @ p["wo"]


def conformer_loss(p, x, y, red=lambda a: a, half_twice=False):
    x = x + red(ff(x, p["ff1"], half_twice))
    x = x + red(mhsa(x, p["att"]))
    x = x + red(ff(x, p["ff2"]))
    x = layer_norm(x, p["g"], 0.0)
    return jnp.mean(jnp.square(x - y))


def conf_step_ref(p, s, x, y):
    loss, g = jax.value_and_grad(conformer_loss)(p, x, y)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def conf_step_tp(bug):
    def f(p, s, x, y):
        def lf(q):
            l = conformer_loss(q, x, y, lambda a: psum(a, "tp"), bug == "ff1-half-twice")
            return l if bug == "loss-not-pmeaned" else pmean(l, "dp")
        loss, g = jax.value_and_grad(lf)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(loss, "dp")
    return f


def ffp():
    return {"g": 1 + R(D10, scale=0.1), "w1": R(D10, Hd10, scale=0.3), "w2": R(Hd10, D10, scale=0.3)}


P10 = {"ff1": ffp(), "ff2": ffp(), "g": 1 + R(D10, scale=0.1),
       "att": {"g": 1 + R(D10, scale=0.1), "wq": R(D10, D10, scale=0.3), "wk": R(D10, D10, scale=0.3),
               "wv": R(D10, D10, scale=0.3), "wo": R(D10, D10, scale=0.3)}}
ffs = {"g": P(), "w1": col, "w2": P("tp", None)}
SPEC10 = {"ff1": ffs, "ff2": ffs, "g": P(), "att": {"g": P(), "wq": col, "wk": col, "wv": col, "wo": P("tp", None)}}
S10 = jax.tree.map(np.asarray, OPT10.init(P10))
S10 = jax.tree.map(lambda a: a + R(*a.shape, scale=0.01) if a.ndim else a, S10)
SS10 = state_specs(S10, SPEC10)
C.smap("s.conformer_macaron_train_step_sgd_vma.dp2xtp4", {"dp": 2, "tp": 4}, conf_step_tp,
       (SPEC10, SS10, dp, dp), (SPEC10, SS10, P()), conf_step_ref, (P10, S10, R(4, 6, D10), R(4, 6, D10)),
       check_vma=True,
       bugs=[("loss-not-pmeaned", ["missing-collective"]), ("ff1-half-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. Whisper encoder stem, time over sp4 (mel NCH)
M11, D11, T11 = 6, 8, 32
POS11 = sinusoid(np.arange(T11 // 2, dtype=np.float64), D11)


def stem_ref(mel, w1, b1, w2, b2, pos):
    h = gelu(conv1d(mel, w1, 1, ((1, 1),)) + b1[:, None])
    h = gelu(conv1d(h, w2, 2, ((1, 1),)) + b2[:, None])
    return jnp.transpose(h, (0, 2, 1)) + pos


def stem_sp(bug):
    def f(mel, w1, b1, w2, b2, pos):
        n, tl = 4, mel.shape[-1]
        me = idx("sp")
        if bug == "conv1-no-halo":
            h = conv1d(mel, w1, 1, ((1, 1),))
        else:
            l = lax.ppermute(mel[..., -1:], "sp", right_perm(n))
            r = lax.ppermute(mel[..., :1], "sp", left_perm(n))
            h = conv1d(jnp.concatenate([l, mel, r], -1), w1)
        h = gelu(h + b1[:, None])
        if bug == "conv2-halo-from-right":
            l2 = lax.ppermute(h[..., :1], "sp", left_perm(n))
        else:
            l2 = lax.ppermute(h[..., -1:], "sp", right_perm(n))
        h = gelu(conv1d(jnp.concatenate([l2, h], -1), w2, 2, ((0, 0),))[..., :tl // 2] + b2[:, None])
        off = 0 if bug == "pos-offset0" else me * (tl // 2)
        return jnp.transpose(h, (0, 2, 1)) + lax.dynamic_slice_in_dim(pos, off, tl // 2, 0)
    return f


C.smap("s.whisper_encoder_stem_conv_s2_positions.sp4", {"sp": 4}, stem_sp,
       (P(None, None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"), stem_ref,
       (R(2, M11, T11), R(D11, M11, 3, scale=0.4), R(D11, scale=0.1), R(D11, D11, 3, scale=0.3),
        R(D11, scale=0.1), POS11),
       bugs=[("pos-offset0", ["wrong-offset"]), ("conv2-halo-from-right", ["wrong-permutation"]),
             ("conv1-no-halo", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 12. mel filterbank over tp4 (frequency bins) + PCEN, batch over dp2
K12, M12 = 16, 6
FB12 = mel_fb(K12, M12)


def pcen(e, s=0.25, alpha=0.8, delta=2.0, r=0.5, eps=1e-6):
    def step(m, et):
        m = (1 - s) * m + s * et
        return m, m
    _, ms = lax.scan(step, e[:, 0], jnp.swapaxes(e, 0, 1))
    ms = jnp.swapaxes(ms, 0, 1)
    return (e / (eps + ms) ** alpha + delta) ** r - delta ** r


def pcen_ref(spec, fb):
    return pcen(jnp.einsum("btk,km->btm", spec, fb))


def pcen_tp(bug):
    def f(spec, fb):
        kl = spec.shape[-1]
        off = 0 if bug == "fb-offset0" else idx("tp") * kl
        part = jnp.einsum("btk,km->btm", spec, lax.dynamic_slice_in_dim(fb, off, kl, 0))
        if bug == "pcen-before-psum":
            return psum(pcen(part + 1e-3), "tp")
        return pcen(psum(part, "tp"))
    return f


SPEC12 = np.square(R(4, 8, K12)) + 0.01
C.smap("s.melfb_freq_tp_pcen_scan.dp2xtp4", {"dp": 2, "tp": 4}, pcen_tp, (P("dp", None, "tp"), P()), dp,
       pcen_ref, (SPEC12, FB12),
       bugs=[("pcen-before-psum", ["wrong-reduction"]), ("fb-offset0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 13. hand-written CTC forward algorithm (log space, lax.scan, blank 0, skip
#     transitions, label padding and frame masks) and its gradient, dp4
B13, T13, F13, V13, L13 = 8, 10, 6, 5, 3
NEG = -1e30


def ctc_nll_one(logp, lab, ylen, tlen):
    s_n = 2 * L13 + 1
    s = jnp.arange(s_n)
    ext = jnp.where(s % 2 == 1, lab[jnp.clip((s - 1) // 2, 0, L13 - 1)], 0)
    prev2 = jnp.concatenate([jnp.array([-1, -1]), ext[:-2]])
    skip = (s % 2 == 1) & (s >= 2) & (ext != prev2)
    valid = s < 2 * ylen + 1
    a0 = jnp.where(s < 2, logp[0, ext], NEG)
    a0 = jnp.where(valid, a0, NEG)

    def step(a, inp):
        lp, t = inp
        a1 = jnp.concatenate([jnp.full((1,), NEG), a[:-1]])
        a2 = jnp.where(skip, jnp.concatenate([jnp.full((2,), NEG), a[:-2]]), NEG)
        m = jnp.maximum(jnp.maximum(a, a1), a2)
        new = m + jnp.log(jnp.exp(a - m) + jnp.exp(a1 - m) + jnp.exp(a2 - m)) + lp[ext]
        new = jnp.where(valid, new, NEG)
        return jnp.where(t < tlen, new, a), None
    a, _ = lax.scan(step, a0, (logp[1:], jnp.arange(1, logp.shape[0])))
    e1, e2 = a[2 * ylen], a[2 * ylen - 1]
    m = jnp.maximum(e1, e2)
    return -(m + jnp.log(jnp.exp(e1 - m) + jnp.exp(e2 - m)))


def ctc_hand_sum(w, feats, labels, ylen, tlen):
    logp = jax.nn.log_softmax(feats @ w, -1)
    return jnp.sum(jax.vmap(ctc_nll_one)(logp, labels, ylen, tlen))


def ctc_hand_ref(w, feats, labels, ylen, tlen):
    return jax.value_and_grad(lambda q: ctc_hand_sum(q, feats, labels, ylen, tlen) / feats.shape[0])(w)


def ctc_hand_dp(bug):
    def f(w, feats, labels, ylen, tlen):
        nb = feats.shape[0] * (1 if bug == "grad-local-mean" else 4)
        loss, g = jax.value_and_grad(lambda q: ctc_hand_sum(q, feats, labels, ylen, tlen) / nb)(w)
        return (pmean if bug == "pmean-loss" else psum)(loss, "dp"), psum(g, "dp")
    return f


YL13 = I(1, L13 + 1, B13)
C.smap("s.ctc_forward_logspace_scan_grad.dp4", {"dp": 4}, ctc_hand_dp, (P(), dp, dp, dp, dp), (P(), P()),
       ctc_hand_ref, (R(F13, V13, scale=0.5), R(B13, T13, F13), I(1, V13, B13, L13), YL13, I(7, T13 + 1, B13)),
       bugs=[("grad-local-mean", ["wrong-scale"]), ("pmean-loss", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 14. bf16 power spectra, mel filterbank with frequency over tp4, the partial
#     mels reduce-scattered over the mel axis, log(. + eps), all_gather'd back
#     (f32 accumulation, bf16 output); batch over dp2. A second correct body
#     scatters over time instead.
EPS14 = 1e-2
FB14 = mel_fb(16, 8).astype(jnp.bfloat16)


def logmel_bf16_ref(spec, fb):
    m = jnp.einsum("btk,km->btm", spec, fb, preferred_element_type=jnp.float32)
    return jnp.log(m + EPS14).astype(jnp.bfloat16)


def logmel_rs(bug, dim=2):
    def f(spec, fb):
        part = jnp.einsum("btk,km->btm", spec, fb, preferred_element_type=jnp.float32)
        if bug == "eps-per-partial":
            part = part + EPS14
        if bug == "log-before-scatter":
            part = jnp.log(part + EPS14)
        m = lax.psum_scatter(part, "tp", scatter_dimension=dim, tiled=True)
        y = m if bug == "log-before-scatter" else jnp.log(m + (0 if bug == "eps-per-partial" else EPS14))
        return lax.all_gather(y.astype(jnp.bfloat16), "tp", axis=dim, tiled=True)
    return f


SPEC14 = (np.square(R(4, 8, 16)) * 0.05).astype(jnp.bfloat16)
C.smap("s.logmel_bf16_freq_tp_reduce_scatter_mel.dp2xtp4", {"dp": 2, "tp": 4}, logmel_rs,
       (P("dp", None, "tp"), P("tp", None)), dp, logmel_bf16_ref, (SPEC14, FB14),
       bugs=[("log-before-scatter", ["wrong-reduction"]), ("eps-per-partial", ["wrong-scale"])])
C.smap("s.logmel_bf16_freq_tp_reduce_scatter_time.dp2xtp4", {"dp": 2, "tp": 4}, lambda b: logmel_rs(b, 1),
       (P("dp", None, "tp"), P("tp", None)), dp, logmel_bf16_ref, (SPEC14, FB14))

# ---------------------------------------------------------------------------
# 15. chunked streaming attention (Emformer-like): 4-frame chunks over sp4,
#     each chunk attends causally to itself and to the last 2 frames before
#     it (the left neighbour's, or the incoming cache on device 0).
D15, CH = 8, 4


def chunk_attn_ref(x, c0, wq, wk, wv):
    xf = jnp.concatenate([c0, x], 1)
    t = x.shape[1]
    q, k, v = x @ wq, xf @ wk, xf @ wv
    i = jnp.arange(t)[:, None]
    j = jnp.arange(t + 2)[None, :] - 2
    ok = (j <= i) & (j >= (i // CH) * CH - 2)
    s = jnp.where(ok, jnp.einsum("bid,bjd->bij", q, k) / np.sqrt(D15), NEG)
    return jnp.einsum("bij,bjd->bid", jax.nn.softmax(s, -1), v)


def chunk_attn_sp(bug):
    def f(x, c0, wq, wk, wv):
        n = 4
        me = idx("sp")
        if bug == "cache-from-right":
            left = lax.ppermute(x[:, :2], "sp", left_perm(n))
        else:
            left = lax.ppermute(x[:, -2:], "sp", right_perm(n))
        if bug != "device0-zero-cache":
            left = jnp.where(me == 0, c0, left)
        xf = jnp.concatenate([left, x], 1)
        q, k, v = x @ wq, xf @ wk, xf @ wv
        i = jnp.arange(CH)[:, None]
        j = jnp.arange(CH + 2)[None, :] - 2
        ok = (j <= i) & ((j >= 0) if bug == "no-cache" else True)
        s = jnp.where(ok, jnp.einsum("bid,bjd->bij", q, k) / np.sqrt(D15), NEG)
        return jnp.einsum("bij,bjd->bid", jax.nn.softmax(s, -1), v)
    return f


C.smap("s.chunked_stream_attn_left_cache.sp4", {"sp": 4}, chunk_attn_sp, (P(None, "sp"), P(), P(), P(), P()),
       P(None, "sp"), chunk_attn_ref,
       (R(2, 16, D15), R(2, 2, D15), R(D15, D15, scale=0.4), R(D15, D15, scale=0.4), R(D15, D15, scale=0.4)),
       bugs=[("cache-from-right", ["wrong-permutation"]), ("device0-zero-cache", ["wrong-halo"]),
             ("no-cache", ["wrong-halo"])])

# ---------------------------------------------------------------------------
# 16. iSTFT overlap-add synthesis with the frames over sp4 (frame 8, hop 4,
#     periodic Hann synthesis window, centre trim of 4 at the start, length
#     64): baseline by .at[].add, body by half-frame blocks, the next
#     device's first half-frame ppermute'd left, the window-square sum a
#     constant sliced at the global offset.
NF16 = 16
WSUM16 = np.zeros(HOP * (NF16 - 1) + NFFT, np.float32)
for _t in range(NF16):
    WSUM16[HOP * _t:HOP * _t + NFFT] += WIN ** 2


def istft_ref(re, im):
    fr = jnp.fft.irfft(lax.complex(re, im), n=NFFT, axis=-1) * WIN
    b, nf, _ = fr.shape
    pos = (HOP * jnp.arange(nf)[:, None] + jnp.arange(NFFT)[None]).reshape(-1)
    y = jnp.zeros((b, WSUM16.shape[0]), fr.dtype).at[:, pos].add(fr.reshape(b, -1))
    return (y / jnp.maximum(WSUM16, 1e-8))[:, NFFT // 2:NFFT // 2 + HOP * nf]


def istft_sp(bug):
    def f(re, im):
        n = 4
        me = idx("sp")
        fr = jnp.fft.irfft(lax.complex(re, im), n=NFFT, axis=-1) * WIN
        h1, h2 = fr[..., :HOP], fr[..., HOP:]
        if bug == "head-to-right":
            recv = lax.ppermute(h1[:, :1], "sp", right_perm(n))
        else:
            recv = lax.ppermute(h1[:, :1], "sp", left_perm(n, cyclic=bug == "cyclic-head"))
        blocks = h2 + jnp.concatenate([h1[:, 1:], recv], 1)  # (b, nf_local, hop)
        b, nl, _ = blocks.shape
        off = NFFT // 2 if bug == "wsum-offset0" else me * nl * HOP + NFFT // 2
        ws = lax.dynamic_slice_in_dim(jnp.asarray(WSUM16), off, nl * HOP)
        return blocks.reshape(b, nl * HOP) / jnp.maximum(ws, 1e-8)
    return f


C.smap("s.istft_overlap_add_halfframes.sp4", {"sp": 4}, istft_sp, (P(None, "sp"), P(None, "sp")), P(None, "sp"),
       istft_ref, (R(2, NF16, NFFT // 2 + 1), R(2, NF16, NFFT // 2 + 1)),
       bugs=[("head-to-right", ["wrong-permutation"]), ("cyclic-head", ["wrong-halo"]),
             ("wsum-offset0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 17. Whisper decoder self-attention decoding step against a KV cache with
#     heads over tp4 and batch over dp2: the new key / value written at the
#     step position by dynamic_update_slice, attention over positions <= pos,
#     output projection psum'd, bias once.
H17, E17, S17 = 4, 4, 8
D17 = H17 * E17


def dec_step(x, kc, vc, pos, wq, wk, wv, wo, bo, pos_of=lambda p: p):
    b = x.shape[0]
    h = wq.shape[1] // E17
    q = (x @ wq).reshape(b, 1, h, E17)
    k = (x @ wk).reshape(b, 1, h, E17)
    v = (x @ wv).reshape(b, 1, h, E17)
    kc = lax.dynamic_update_slice_in_dim(kc, k, pos_of(pos), 1)
    vc = lax.dynamic_update_slice_in_dim(vc, v, pos_of(pos), 1)
    s = jnp.einsum("bqhe,bkhe->bhqk", q, kc) / np.sqrt(E17)
    s = jnp.where(jnp.arange(S17) <= pos, s, NEG)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vc).reshape(b, h * E17) @ wo
    return o, kc, vc


def dec_ref(x, kc, vc, pos, wq, wk, wv, wo, bo):
    o, kc, vc = dec_step(x, kc, vc, pos, wq, wk, wv, wo, bo)
    return x + o + bo, kc, vc


def dec_tp(bug):
    def f(x, kc, vc, pos, wq, wk, wv, wo, bo):
        pof = (lambda p: p + idx("tp")) if bug == "pos-plus-rank" else (lambda p: p)
        o, kc, vc = dec_step(x, kc, vc, pos, wq, wk, wv, wo, bo, pof)
        if bug == "no-psum":
            return x + o + bo, kc, vc
        if bug == "bias-in-psum":
            return x + psum(o + bo, "tp"), kc, vc
        return x + psum(o, "tp") + bo, kc, vc
    return f


cache = P("dp", None, "tp")
C.smap("s.whisper_decoder_kvcache_step_heads_tp.dp2xtp4", {"dp": 2, "tp": 4}, dec_tp,
       (dp, cache, cache, P(), col, col, col, P("tp", None), P()), (dp, cache, cache), dec_ref,
       (R(4, D17), R(4, S17, H17, E17), R(4, S17, H17, E17), np.int32(4), R(D17, D17, scale=0.3),
        R(D17, D17, scale=0.3), R(D17, D17, scale=0.3), R(D17, D17, scale=0.3), R(D17, scale=0.1)),
       bugs=[("pos-plus-rank", ["wrong-offset"]), ("no-psum", ["missing-collective"]),
             ("bias-in-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 18. a second correct body of family 1: frames by strided slices (the
#     frame's two hop-halves as x[:, 0::4]-style reshapes), device 0's
#     reflect padding chosen by lax.cond on axis_index.


def whisper_logmel_slices(bug):
    def f(x, fb):
        n = 4
        halo = lax.ppermute(x[:, -HOP:], "sp", right_perm(n))
        halo = lax.cond(idx("sp") == 0, lambda: x[:, HOP:0:-1], lambda: halo)
        xb = jnp.concatenate([halo, x], 1)  # (b, hop * (nl + 1))
        b = xb.shape[0]
        blocks = xb.reshape(b, -1, HOP)
        fr = jnp.concatenate([blocks[:, :-1], blocks[:, 1:]], -1)  # (b, nl, NFFT)
        l = mel_from_frames(fr, fb)
        l = jnp.maximum(l, pmax(l.max(axis=(1, 2), keepdims=True), "sp") - 8.0)
        return (l + 4.0) / 4.0
    return f


C.smap("s.whisper_logmel_strided_frames_cond_pad.sp4", {"sp": 4}, whisper_logmel_slices, (P(None, "sp"), P()),
       P(None, "sp"), whisper_logmel, (X1, FB1))

# ---------------------------------------------------------------------------
# 19. a bf16 conformer feed-forward half (LayerNorm in f32, swish, bf16
#     matmuls) with the hidden width over tp4 and the row-parallel partials
#     psum'd in bf16, batch over dp2. Bugs: psum over dp,
#     the 0.5 inside and outside.


def ff_bf16_ref(x, g, w1, w2):
    h = layer_norm(x.astype(jnp.float32), g, 0.0).astype(jnp.bfloat16)
    return x + 0.5 * (jax.nn.swish(h @ w1) @ w2)


def ff_bf16_tp(bug):
    def f(x, g, w1, w2):
        h = layer_norm(x.astype(jnp.float32), g, 0.0).astype(jnp.bfloat16)
        part = jax.nn.swish(h @ w1) @ w2
        if bug == "half-twice":
            return x + 0.5 * psum(0.5 * part, "tp")
        return x + 0.5 * psum(part, "dp" if bug == "psum-dp" else "tp")
    return f


C.smap("s.conformer_ff_half_bf16_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, ff_bf16_tp, (dp, P(), col, P("tp", None)),
       dp, ff_bf16_ref, (R(4, 8, 16, dt=jnp.bfloat16), 1 + R(16, scale=0.1), R(16, 32, scale=0.3, dt=jnp.bfloat16),
                         R(32, 16, scale=0.3, dt=jnp.bfloat16)),
       bugs=[("psum-dp", ["wrong-axis"]), ("half-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.whisper_logmel.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), whisper_logmel, (X1, FB1))
C.gspmd("g.wav2vec2_featextract.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), w2v_ref, (X2, P2))
C.gspmd("g.whisper_cross_attn.dp2xtp4", {"dp": 2, "tp": 4}, (dp, dp, SP6), dp, xattn_ref,
        (R(4, 4, D6), R(4, 8, D6), P6))
C.gspmd("g.ctc_optax_train_step.dp4", {"dp": 4}, (P(), P(), dp, dp, dp, dp), (P(), P(), P()), ctc_step_ref,
        (P5, S5, R(B5, T5, F5), LPAD5, LAB5, YPAD5))
C.gspmd("g.hifigan_upsampler.sp4", {"sp": 4}, (P(None, None, "sp"), P(), P(), P(), P()), P(None, None, "sp"),
        hifi_ref, (R(2, C8i, 16), R(C8i, C8o, 4, scale=0.4), R(C8o, scale=0.1), R(C8o, C8o, 3, scale=0.4),
                   R(C8o, scale=0.1)))
C.gspmd("g.conformer_macaron_train_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC10, SS10, dp, dp),
        (SPEC10, SS10, P()), conf_step_ref, (P10, S10, R(4, 6, D10), R(4, 6, D10)))

C.gspmd("g.whisper_encoder_stem.sp4", {"sp": 4}, (P(None, None, "sp"), P(), P(), P(), P(), P()), P(None, "sp"),
        stem_ref, (R(2, M11, T11), R(D11, M11, 3, scale=0.4), R(D11, scale=0.1), R(D11, D11, 3, scale=0.3),
                   R(D11, scale=0.1), POS11))
C.gspmd("g.specaugment_foldin_cmvn.dp4", {"dp": 4}, (P(), dp, dp), dp, specaug_ref,
        (np.int32(11), R(8, T9, F9), I(8, T9 + 1, 8)))
C.gspmd("g.streaming_leaky_state.sp4", {"sp": 4}, (P(None, "sp"), P(), P(), P(), P()), (P(None, "sp"), P(), P()),
        stream_ref, (R(2, 32, C7), A7, R(2, C7), R(2, 2, C7), R(3, C7, scale=0.5)))
C.gspmd("g.melfb_pcen.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None, "tp"), P("tp", None)), dp, pcen_ref,
        (SPEC12, FB12))
C.gspmd("g.ctc_forward_logspace_grad.dp4", {"dp": 4}, (P(), dp, dp, dp, dp), (P(), P()), ctc_hand_ref,
        (R(F13, V13, scale=0.5), R(B13, T13, F13), I(1, V13, B13, L13), YL13, I(7, T13 + 1, B13)))

C.gspmd("g.istft_overlap_add.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp")), P(None, "sp"), istft_ref,
        (R(2, NF16, NFFT // 2 + 1), R(2, NF16, NFFT // 2 + 1)))
C.gspmd("g.whisper_decoder_kvcache_step.dp2xtp4", {"dp": 2, "tp": 4},
        (dp, cache, cache, P(), col, col, col, P("tp", None), P()), (dp, cache, cache), dec_ref,
        (R(4, D17), R(4, S17, H17, E17), R(4, S17, H17, E17), np.int32(5), R(D17, D17, scale=0.3),
         R(D17, D17, scale=0.3), R(D17, D17, scale=0.3), R(D17, D17, scale=0.3), R(D17, scale=0.1)))

C.finish()
