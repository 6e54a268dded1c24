"""samples/fresh72: a 72nd batch of programs as a user writes them, on the theme of sequence models for audio and time series with the time axis sharded over devices in current JAX (dilated causal TCN stacks whose halos outgrow one device's block, conformer convolution modules, relative-position attention and macaron feed-forwards, PatchTST patching across device boundaries, STFT framing with a mel filterbank, SpecAugment masks from global positions, optax training steps under sp, dp x sp and sp x tp), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a TCN stack (kernel 3, dilations 1, 2, 4, 8, ReLU, residual) on a time
    axis of 32 over sp4 (8 samples per device): the halo of a layer is
    dilation*(k-1) = 2, 4, 8, 16 samples, so the last layer needs the blocks
    of the two previous devices, brought by non-cyclic ppermutes of shift 1
    and 2; the baseline is lax.conv_general_dilated with rhs_dilation and
    causal padding, the body einsums over shifted slices. Bugs: only one hop
    (the halo zero-padded when wider than a block), cyclic ppermutes (device
    0 gets the end of the signal), the two hops concatenated in the wrong
    order.
 2. a conformer convolution module (LayerNorm, pointwise conv to 2D, GLU,
    depthwise conv of kernel 7 centred, BatchNorm in training mode with
    statistics over batch and global time, swish, pointwise conv, residual)
    with time over sp4: halos of 3 from both neighbours, BatchNorm sums and
    sums of squares psum'd. Bugs: the right halo also taken from the left
    neighbour, BatchNorm statistics of the local block, psum'd sums divided
    by the local count.
 3. relative-position self-attention (Shaw-style learned bias per head on
    the clipped distance j - i, plus a conformer-style content bias u added
    to the queries) with time over sp4: keys and values all_gather'd, the
    query positions offset by the device. Bugs: local query positions, the
    local keys only.
 4. a macaron conformer block (half-step FF, causal depthwise conv with a
    left halo, half-step FF, final LayerNorm) on an sp2 x tp4 mesh: the FF
    hidden width over tp (column / row parallel, psum over tp; the 0.5
    written inside the psum in FF1, outside in FF2), time over sp. Bugs:
    FF2's psum over sp instead of tp, no conv halo (zeros), FF2's output
    bias added to every partial sum before the psum.
 5. PatchTST input stage on dp2 x sp4: RevIN (mean / std over the global
    time axis per series and channel, psum'd), patches of 8 with stride 4
    over a series padded at the end by repeating its last value (the
    ReplicationPad of PatchTST), so each device's second patch needs 4
    samples of its right neighbour and the last device pads; linear patch
    embedding plus positional embedding sliced at the device's patch offset.
    Bugs: RevIN statistics of the local block, the last device padding with
    zeros, the positional embedding sliced at offset 0.
 6. log-mel features on sp4: STFT with frame 16, hop 8, a periodic Hann
    window, the signal zero-padded by one hop at the end; each device's
    second frame takes 8 samples of its right neighbour (zeros on the last
    device); rfft, power, a triangular mel filterbank, log, then per
    utterance mean normalisation over the global frames (pmean). Bugs: a
    cyclic halo, the halo from the left neighbour, the mean of the local
    frames.
 7. SpecAugment on dp2 x sp4: per-utterance time masks [t0, t0 + w) in
    global frame indices and frequency masks, filled with the utterance's
    global mean (psum over sp). Bugs: the time offset from the dp index,
    no time offset, the fill value the local mean.
 8. a training step of a 2-layer causal TCN regressor (kernel 2,
    dilations 1 and 4, Conv1d in -> hidden, ReLU, residual, a linear head)
    on dp2 x sp4: local squared error over the global count, jax.grad
    through the ppermute'd halos, gradients psum'd over (dp, sp) by hand,
    optax.adam. Bugs: gradients psum'd over dp only, the loss over the
    local count, stop_gradient on the halo of the second layer.
 9. a training step of a GLU + causal depthwise-conv block on sp4 x tp2
    (check_vma=True): GLU halves and the depthwise kernel column-sharded
    over tp (the depthwise kernel passed whole and sliced at the tp offset),
    output projection row-parallel psum'd over tp, the loss psum'd over sp
    inside the differentiated function, optax.sgd with momentum. Bugs: the
    halo from the right neighbour, the depthwise kernel sliced at offset 0,
    the loss divided by the local count.
10. a TCN (kernel 2, dilations 1, 2, 4, 8, tanh, residual) on sp8 (4
    samples per device, so the last halo spans two blocks) with each halo
    cut by dynamic_slice from an all_gather'd copy of the whole sequence
    zero-padded by the dilation. Bugs: no zero padding (the slice start
    clamped at device 0), the window started one block early.
11. training-mode BatchNorm + SiLU over batch and time on sp4 with the
    channel sums reduced by psum_scatter over the channels and all_gather'd
    back, the variance in two passes. Bug: divided by the local count.
12. a causal-conv regressor training step on sp4 with check_vma=True whose
    replicated parameters' gradients are psum'd by JAX itself (the local
    loss varies over sp, nothing psum'd by hand), optax.adamw. Bug: an
    extra psum of the gradients by hand (4 times the gradient).
GSPMD pairs (correct): log-mel + CMVN with the signal over sp4; the TCN
stack of family 1 by lax.conv_general_dilated over sp4; PatchTST RevIN +
patch embedding on dp2 x sp4; a conformer conv module training step with
optax.adamw on dp2 x sp4; relative-position attention over sp4.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh72.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh72.py"
C = Corpus("samples/fresh72", SCRIPT, "samples/gen/run_fresh72.sh", sys.argv[1:])
rng, R, I = seeded(7272)
psum, pmean, idx, ppermute = lax.psum, lax.pmean, lax.axis_index, lax.ppermute


def shift_from_left(x, axis, n, s=1, cyclic=False):
    """Device i gets device i - s's x (zeros where there is none)."""
    perm = [(i, (i + s) % n) for i in range(n)] if cyclic else [(i, i + s) for i in range(n - s)]
    return ppermute(x, axis, perm)


def shift_from_right(x, axis, n, s=1):
    return ppermute(x, axis, [(i, i - s) for i in range(s, n)])


def layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


# ---------------------------------------------------------------------------
# 1. TCN stack, dilations 1..8, halos up to two blocks wide.
B1, T1, C1, K1, DIL1 = 2, 32, 8, 3, (1, 2, 4, 8)


def tcn_ref(x, ws, bs):
    for w, b, d in zip(ws, bs, DIL1):
        pad = d * (K1 - 1)
        y = lax.conv_general_dilated(x, w, (1,), [(pad, 0)], rhs_dilation=(d,),
                                     dimension_numbers=("NWC", "WIO", "NWC"))
        x = x + jax.nn.relu(y + b)
    return x


def tcn_sp(bug):
    def f(x, ws, bs):
        n, tl = 4, x.shape[1]
        for w, b, d in zip(ws, bs, DIL1):
            h = d * (K1 - 1)
            hops = -(-h // tl)
            if bug == "one-hop-only":
                hops = 1
            shifts = range(1, hops + 1) if bug == "hops-wrong-order" else range(hops, 0, -1)
            parts = [shift_from_left(x, "sp", n, s, cyclic=(bug == "cyclic")) for s in shifts]
            halo = jnp.concatenate(parts, 1)
            if halo.shape[1] < h:
                halo = jnp.pad(halo, ((0, 0), (h - halo.shape[1], 0), (0, 0)))
            ext = jnp.concatenate([halo[:, halo.shape[1] - h:], x], 1)
            y = sum(jnp.einsum("btc,cd->btd", ext[:, j * d:j * d + tl], w[j]) for j in range(K1))
            x = x + jax.nn.relu(y + b)
        return x
    return f


WS1 = [R(K1, C1, C1, scale=0.3) for _ in DIL1]
BS1 = [R(C1, scale=0.1) for _ in DIL1]
X1 = R(B1, T1, C1)
C.smap("s.tcn_dilated_multihop_halo.sp4", {"sp": 4}, tcn_sp, (P(None, "sp"), P(), P()), P(None, "sp"),
       tcn_ref, (X1, WS1, BS1),
       bugs=[("one-hop-only", ["missing-collective"]), ("cyclic", ["wrong-permutation"]),
             ("hops-wrong-order", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 2. conformer convolution module, BatchNorm over global time.
B2, T2, D2, K2 = 2, 32, 8, 7


def conv_module_ref(x, p):
    h = layer_norm(x, p["ln_g"], p["ln_b"])
    h = h @ p["pw1"]
    a, gate = jnp.split(h, 2, -1)
    h = a * jax.nn.sigmoid(gate)
    hp = jnp.pad(h, ((0, 0), (K2 // 2, K2 // 2), (0, 0)))
    h = sum(hp[:, j:j + x.shape[1]] * p["dw"][j] for j in range(K2))
    mu = h.mean((0, 1))
    var = h.var((0, 1))
    h = (h - mu) / jnp.sqrt(var + 1e-5) * p["bn_g"] + p["bn_b"]
    h = jax.nn.swish(h)
    return x + h @ p["pw2"]


def conv_module_sp(bug):
    def f(x, p):
        n, tl, b = 4, x.shape[1], x.shape[0]
        h = layer_norm(x, p["ln_g"], p["ln_b"])
        a, gate = jnp.split(h @ p["pw1"], 2, -1)
        h = a * jax.nn.sigmoid(gate)
        r = K2 // 2
        left = shift_from_left(h[:, -r:], "sp", n)
        right = shift_from_left(h[:, :r], "sp", n) if bug == "right-from-left" else shift_from_right(h[:, :r], "sp", n)
        hp = jnp.concatenate([left, h, right], 1)
        h = sum(hp[:, j:j + tl] * p["dw"][j] for j in range(K2))
        s1, s2 = h.sum((0, 1)), jnp.square(h).sum((0, 1))
        cnt = b * tl
        if bug != "bn-local-stats":
            s1, s2 = psum(s1, "sp"), psum(s2, "sp")
            if bug != "bn-local-count":
                cnt = cnt * n
        mu = s1 / cnt
        var = s2 / cnt - mu * mu
        h = (h - mu) * lax.rsqrt(var + 1e-5) * p["bn_g"] + p["bn_b"]
        return x + jax.nn.swish(h) @ p["pw2"]
    return f


P2 = {"ln_g": 1 + R(D2, scale=0.1), "ln_b": R(D2, scale=0.1), "pw1": R(D2, 2 * D2, scale=0.4),
      "dw": R(K2, D2, scale=0.4), "bn_g": 1 + R(D2, scale=0.1), "bn_b": R(D2, scale=0.1), "pw2": R(D2, D2, scale=0.4)}
SP2 = jax.tree.map(lambda _: P(), P2)
C.smap("s.conformer_convmodule_glu_batchnorm.sp4", {"sp": 4}, conv_module_sp, (P(None, "sp"), SP2), P(None, "sp"),
       conv_module_ref, (R(B2, T2, D2), P2),
       bugs=[("right-from-left", ["wrong-permutation"]), ("bn-local-stats", ["missing-collective"]),
             ("bn-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. relative-position attention (clipped-distance bias table + content bias u).
B3, T3, H3, E3, KC3 = 2, 16, 2, 8, 5


def relattn_ref(q, k, v, table, u):
    t = q.shape[1]
    rel = jnp.clip(jnp.arange(t)[None, :] - jnp.arange(t)[:, None], -KC3, KC3) + KC3
    bias = table[:, rel]  # (h, q, k)
    s = jnp.einsum("bqhe,bkhe->bhqk", q + u, k) / np.sqrt(E3) + bias
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def relattn_sp(bug):
    def f(q, k, v, table, u):
        tl = q.shape[1]
        if bug == "local-keys-only":
            kk, vv, kpos = k, v, idx("sp") * tl + jnp.arange(tl)
        else:
            kk = lax.all_gather(k, "sp", axis=1, tiled=True)
            vv = lax.all_gather(v, "sp", axis=1, tiled=True)
            kpos = jnp.arange(kk.shape[1])
        qpos = jnp.arange(tl) if bug == "local-query-pos" else idx("sp") * tl + jnp.arange(tl)
        rel = jnp.clip(kpos[None, :] - qpos[:, None], -KC3, KC3) + KC3
        s = jnp.einsum("bqhe,bkhe->bhqk", q + u, kk) * (1.0 / np.sqrt(E3)) + jnp.take(table, rel, axis=1)
        return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), vv)
    return f


RA3 = (R(B3, T3, H3, E3), R(B3, T3, H3, E3), R(B3, T3, H3, E3), R(H3, 2 * KC3 + 1), R(H3, E3, scale=0.3))
C.smap("s.relpos_shaw_bias_u_attention.sp4", {"sp": 4}, relattn_sp, (P(None, "sp"),) * 3 + (P(), P()),
       P(None, "sp"), relattn_ref, RA3,
       bugs=[("local-query-pos", ["wrong-offset"]), ("local-keys-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. macaron conformer block on sp2 x tp4.
B4, T4, D4, F4, K4 = 2, 16, 8, 32, 3


def ff_ref(x, g, b, w1, w2, b2):
    return jax.nn.swish(layer_norm(x, g, b) @ w1) @ w2 + b2


def macaron_ref(x, p):
    x = x + 0.5 * ff_ref(x, p["g1"], p["c1"], p["w11"], p["w12"], p["b12"])
    h = layer_norm(x, p["gc"], p["cc"])
    hp = jnp.pad(h, ((0, 0), (K4 - 1, 0), (0, 0)))
    x = x + jax.nn.gelu(sum(hp[:, j:j + x.shape[1]] * p["dw"][j] for j in range(K4)))
    x = x + 0.5 * ff_ref(x, p["g2"], p["c2"], p["w21"], p["w22"], p["b22"])
    return layer_norm(x, p["gf"], p["cf"])


def macaron_sptp(bug):
    def f(x, p):
        tl = x.shape[1]
        part = jax.nn.swish(layer_norm(x, p["g1"], p["c1"]) @ p["w11"]) @ p["w12"]
        x = x + psum(0.5 * part, "tp") + 0.5 * p["b12"]
        h = layer_norm(x, p["gc"], p["cc"])
        halo = shift_from_left(h[:, tl - (K4 - 1):], "sp", 2)
        if bug == "no-conv-halo":
            halo = jnp.zeros_like(halo)
        hp = jnp.concatenate([halo, h], 1)
        x = x + jax.nn.gelu(sum(hp[:, j:j + tl] * p["dw"][j] for j in range(K4)))
        part = jax.nn.swish(layer_norm(x, p["g2"], p["c2"]) @ p["w21"]) @ p["w22"]
        if bug == "bias-on-partials":
            y = psum(part + p["b22"], "tp")
        else:
            y = psum(part, "sp" if bug == "ff2-psum-over-sp" else "tp") + p["b22"]
        x = x + 0.5 * y
        return layer_norm(x, p["gf"], p["cf"])
    return f


def _ln(d):
    return 1 + R(d, scale=0.1), R(d, scale=0.1)


P4 = {}
P4["g1"], P4["c1"] = _ln(D4)
P4["w11"], P4["w12"], P4["b12"] = R(D4, F4, scale=0.3), R(F4, D4, scale=0.3), R(D4, scale=0.1)
P4["gc"], P4["cc"] = _ln(D4)
P4["dw"] = R(K4, D4, scale=0.5)
P4["g2"], P4["c2"] = _ln(D4)
P4["w21"], P4["w22"], P4["b22"] = R(D4, F4, scale=0.3), R(F4, D4, scale=0.3), R(D4, scale=0.1)
P4["gf"], P4["cf"] = _ln(D4)
SP4 = {k: P() for k in P4}
SP4.update({"w11": P(None, "tp"), "w12": P("tp"), "w21": P(None, "tp"), "w22": P("tp")})
C.smap("s.macaron_conformer_ff_tp_conv_sp.sp2xtp4", {"sp": 2, "tp": 4}, macaron_sptp, (P(None, "sp"), SP4),
       P(None, "sp"), macaron_ref, (R(B4, T4, D4), P4),
       bugs=[("ff2-psum-over-sp", ["wrong-axis"]), ("no-conv-halo", ["missing-collective"]),
             ("bias-on-partials", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. PatchTST: RevIN + overlapping patches (len 8, stride 4) + embedding.
B5, C5, L5, PL5, ST5, D5 = 4, 3, 32, 8, 4, 16
NP5 = (L5 + ST5 - PL5) // ST5 + 1  # 8 patches


def patchtst_ref(x, gam, bet, wp, bp, pos):
    mu = x.mean(-1, keepdims=True)
    sd = jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)
    z = (x - mu) / sd * gam[:, None] + bet[:, None]
    z = jnp.concatenate([z, jnp.repeat(z[..., -1:], ST5, -1)], -1)
    idxs = ST5 * jnp.arange(NP5)[:, None] + jnp.arange(PL5)[None, :]
    patches = z[..., idxs]  # (b, c, np, pl)
    return jnp.einsum("bcnp,pd->bcnd", patches, wp) + bp + pos


def patchtst_dpsp(bug):
    def f(x, gam, bet, wp, bp, pos):
        n, tl = 4, x.shape[-1]
        me = idx("sp")
        s1, s2 = x.sum(-1, keepdims=True), jnp.square(x).sum(-1, keepdims=True)
        cnt = tl
        if bug != "revin-local-stats":
            s1, s2, cnt = psum(s1, "sp"), psum(s2, "sp"), tl * n
        mu = s1 / cnt
        sd = jnp.sqrt(s2 / cnt - mu * mu + 1e-5)
        z = (x - mu) / sd * gam[:, None] + bet[:, None]
        nxt = shift_from_right(z[..., :ST5], "sp", n)
        fill = jnp.zeros_like(nxt) if bug == "last-pad-zeros" else jnp.broadcast_to(z[..., -1:], nxt.shape)
        nxt = jnp.where(me == n - 1, fill, nxt)
        ext = jnp.concatenate([z, nxt], -1)
        npl = tl // ST5
        patches = jnp.stack([ext[..., i * ST5:i * ST5 + PL5] for i in range(npl)], 2)
        off = 0 if bug == "pos-local-slice" else me * npl
        pe = lax.dynamic_slice_in_dim(pos, off, npl, 0)
        return jnp.einsum("bcnp,pd->bcnd", patches, wp) + bp + pe
    return f


X5 = (R(B5, C5, L5) * 2 + 0.5 + np.linspace(0, 3, L5, dtype=np.float32)).astype(np.float32)
A5 = (X5, 1 + R(C5, scale=0.1), R(C5, scale=0.1), R(PL5, D5, scale=0.3), R(D5, scale=0.1), R(NP5, D5, scale=0.2))
C.smap("s.patchtst_revin_overlap_patches.dp2xsp4", {"dp": 2, "sp": 4}, patchtst_dpsp,
       (P("dp", None, "sp"), P(), P(), P(), P(), P()), P("dp", None, "sp"), patchtst_ref, A5,
       bugs=[("revin-local-stats", ["missing-collective"]), ("last-pad-zeros", ["wrong-offset"]),
             ("pos-local-slice", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. log-mel + CMVN, frames straddling device boundaries.
B6, N6, FR6, HOP6, M6 = 2, 64, 16, 8, 5
WIN6 = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(FR6) / FR6)).astype(np.float32)


def mel_fb(nbins, nmel, sr=16000.0):
    hz = np.linspace(0, sr / 2, nbins)
    mel = lambda f: 2595 * np.log10(1 + f / 700.0)  # noqa: E731
    imel = lambda m: 700 * (10 ** (m / 2595.0) - 1)  # noqa: E731
    pts = imel(np.linspace(mel(0), mel(sr / 2), nmel + 2))
    fb = np.zeros((nbins, nmel), np.float32)
    for m in range(nmel):
        lo, c, hi = pts[m], pts[m + 1], pts[m + 2]
        fb[:, m] = np.maximum(0, np.minimum((hz - lo) / (c - lo), (hi - hz) / (hi - c)))
    return fb


FB6 = mel_fb(FR6 // 2 + 1, M6)


def logmel_ref(x):
    xp = jnp.pad(x, ((0, 0), (0, HOP6)))
    nf = N6 // HOP6
    frames = xp[:, HOP6 * jnp.arange(nf)[:, None] + jnp.arange(FR6)[None, :]] * WIN6
    spec = jnp.abs(jnp.fft.rfft(frames, axis=-1)) ** 2
    lm = jnp.log(spec @ FB6 + 1e-6)
    return lm - lm.mean(1, keepdims=True)


def logmel_sp(bug):
    def f(x):
        n, tl = 4, x.shape[1]
        if bug == "halo-cyclic":
            nxt = ppermute(x[:, :HOP6], "sp", [(i, (i - 1) % n) for i in range(n)])
        elif bug == "halo-from-left":
            nxt = shift_from_left(x[:, :HOP6], "sp", n)
        else:
            nxt = shift_from_right(x[:, :HOP6], "sp", n)
        ext = jnp.concatenate([x, nxt], 1)
        frames = jnp.stack([ext[:, i * HOP6:i * HOP6 + FR6] for i in range(tl // HOP6)], 1) * WIN6
        X = jnp.fft.rfft(frames, axis=-1)
        lm = jnp.log(jnp.einsum("bfk,km->bfm", X.real ** 2 + X.imag ** 2, FB6) + 1e-6)
        mu = lm.mean(1, keepdims=True)
        if bug != "cmvn-local-mean":
            mu = pmean(mu, "sp")
        return lm - mu
    return f


C.smap("s.stft_logmel_cmvn_frames_straddle.sp4", {"sp": 4}, logmel_sp, (P(None, "sp"),), P(None, "sp"),
       logmel_ref, (R(B6, N6),),
       bugs=[("halo-cyclic", ["wrong-permutation"]), ("halo-from-left", ["wrong-permutation"]),
             ("cmvn-local-mean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 7. SpecAugment with global time positions, filled with the global mean.
B7, T7, F7 = 4, 32, 8


def specaug_ref(x, t0, tw, f0, fw):
    t = jnp.arange(x.shape[1])
    fq = jnp.arange(x.shape[2])
    tm = (t[None, :] >= t0[:, None]) & (t[None, :] < (t0 + tw)[:, None])
    fm = (fq[None, :] >= f0[:, None]) & (fq[None, :] < (f0 + fw)[:, None])
    m = tm[:, :, None] | fm[:, None, :]
    fill = x.mean((1, 2), keepdims=True)
    return jnp.where(m, fill, x)


def specaug_dpsp(bug):
    def f(x, t0, tw, f0, fw):
        tl = x.shape[1]
        ax = "dp" if bug == "offset-from-dp" else "sp"
        t = jnp.arange(tl) + (0 if bug == "no-offset" else idx(ax) * tl)
        tm = (t[None, :] >= t0[:, None]) & (t[None, :] < (t0 + tw)[:, None])
        fq = jnp.arange(x.shape[2])
        fm = (fq[None, :] >= f0[:, None]) & (fq[None, :] < (f0 + fw)[:, None])
        fill = x.sum((1, 2), keepdims=True)
        fill = fill / (tl * x.shape[2]) if bug == "fill-local-mean" else psum(fill, "sp") / (4 * tl * x.shape[2])
        return jnp.where(tm[:, :, None] | fm[:, None, :], fill, x)
    return f


A7 = (R(B7, T7, F7) + 1.0, np.array([3, 12, 20, 5], np.int32), np.array([8, 6, 10, 4], np.int32),
      np.array([1, 5, 0, 3], np.int32), np.array([2, 2, 3, 1], np.int32))
C.smap("s.specaugment_global_time_mask_meanfill.dp2xsp4", {"dp": 2, "sp": 4}, specaug_dpsp,
       (P("dp", "sp"), P("dp"), P("dp"), P("dp"), P("dp")), P("dp", "sp"), specaug_ref, A7,
       bugs=[("offset-from-dp", ["wrong-axis"]), ("no-offset", ["wrong-offset"]),
             ("fill-local-mean", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. training step of a 2-layer causal TCN on dp2 x sp4, adam.
B8, T8, CI8, H8 = 4, 32, 2, 8
OPT8 = optax.adam(1e-2)


def tcn8_fwd(p, x, halo=None):
    """halo(a, w) -> the w samples before a's block (None: zero causal pad)."""
    def conv(a, w, d):
        hw = d * (w.shape[0] - 1)
        left = jnp.zeros((a.shape[0], hw, a.shape[2]), a.dtype) if halo is None else halo(a, hw)
        ext = jnp.concatenate([left, a], 1)
        t = a.shape[1]
        return sum(ext[:, j * d:j * d + t] @ w[j] for j in range(w.shape[0]))
    h = jax.nn.relu(conv(x, p["w1"], 1) + p["b1"])
    h = h + jax.nn.relu(conv(h, p["w2"], 4) + p["b2"])
    return h @ p["wo"] + p["bo"]


def tcn8_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(tcn8_fwd(p, x) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def tcn8_dpsp(bug):
    def f(p, s, x, y):
        n = 4
        ntot = x.shape[0] * 2 * x.shape[1] * n * y.shape[2]

        def halo(a, w):
            got = shift_from_left(a[:, a.shape[1] - w:], "sp", n)
            return lax.stop_gradient(got) if (bug == "stop-gradient-halo" and w > 1) else got

        def loss(p):
            cnt = y.size if bug == "loss-local-count" else ntot
            return jnp.sum(jnp.square(tcn8_fwd(p, x, halo) - y)) / cnt
        l, g = jax.value_and_grad(loss)(p)
        axes = ("dp",) if bug == "grads-psum-dp-only" else ("dp", "sp")
        g = psum(g, axes)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "sp"))
    return f


P8 = {"w1": R(2, CI8, H8, scale=0.4), "b1": R(H8, scale=0.1), "w2": R(2, H8, H8, scale=0.3),
      "b2": R(H8, scale=0.1), "wo": R(H8, 1, scale=0.3), "bo": R(1, scale=0.1)}
S8 = OPT8.init(P8)
S8 = jax.tree.map(lambda a: a + 0.01 * jnp.ones_like(a) if a.dtype == jnp.float32 else a, S8)
SP8 = jax.tree.map(lambda _: P(), P8)
SS8 = jax.tree.map(lambda _: P(), S8)
C.smap("s.train_tcn_halo_grad_adam.dp2xsp4", {"dp": 2, "sp": 4}, tcn8_dpsp,
       (SP8, SS8, P("dp", "sp"), P("dp", "sp")), (SP8, SS8, P()), tcn8_step,
       (P8, S8, R(B8, T8, CI8), R(B8, T8, 1)),
       bugs=[("grads-psum-dp-only", ["missing-collective"]), ("loss-local-count", ["wrong-scale"]),
             ("stop-gradient-halo", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 9. GLU + causal depthwise conv training step on sp4 x tp2 (check_vma=True).
B9, T9, D9, DH9, K9 = 2, 16, 8, 8, 3
OPT9 = optax.sgd(0.1, momentum=0.9)


def glu9_fwd(p, x, left=None, dw=None):
    h = (x @ p["wa"]) * jax.nn.sigmoid(x @ p["wg"])
    pad = jnp.zeros((h.shape[0], K9 - 1, h.shape[2]), h.dtype) if left is None else left(h)
    hp = jnp.concatenate([pad, h], 1)
    dw = p["dw"] if dw is None else dw
    h = jax.nn.swish(sum(hp[:, j:j + x.shape[1]] * dw[j] for j in range(K9)))
    return h @ p["wo"]


def glu9_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(x + glu9_fwd(p, x) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def glu9_sptp(bug):
    def f(p, s, x, y):
        n = 4
        dhl = p["wa"].shape[1]

        def left(h):
            tail = h[:, h.shape[1] - (K9 - 1):]
            return shift_from_right(tail, "sp", n) if bug == "halo-from-right" else shift_from_left(tail, "sp", n)

        def loss(p):
            off = 0 if bug == "dw-slice-at-zero" else idx("tp") * dhl
            dw = lax.dynamic_slice_in_dim(p["dw"], off, dhl, 1)
            out = x + psum(glu9_fwd(p, x, left, dw), "tp")
            cnt = y.size if bug == "loss-local-count" else y.size * n
            return psum(jnp.sum(jnp.square(out - y)), "sp") / cnt
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P9 = {"wa": R(D9, DH9, scale=0.4), "wg": R(D9, DH9, scale=0.4), "dw": R(K9, DH9, scale=0.5),
      "wo": R(DH9, D9, scale=0.4)}
S9 = OPT9.init(P9)
S9 = jax.tree.map(lambda a: a + 0.02 if hasattr(a, "dtype") and a.dtype == jnp.float32 else a, S9)
SP9 = {"wa": P(None, "tp"), "wg": P(None, "tp"), "dw": P(), "wo": P("tp")}
SS9 = state_specs(S9, SP9)
C.smap("s.train_glu_dwconv_sp_tp_sgdm.sp4xtp2", {"sp": 4, "tp": 2}, glu9_sptp,
       (SP9, SS9, P(None, "sp"), P(None, "sp")), (SP9, SS9, P()), glu9_step,
       (P9, S9, R(B9, T9, D9), R(B9, T9, D9)), check_vma=True,
       bugs=[("halo-from-right", ["wrong-permutation"]), ("dw-slice-at-zero", ["wrong-offset"]),
             ("loss-local-count", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 10. TCN (kernel 2, dilations 1, 2, 4, 8) on sp8 with the halo cut from an
#     all_gather'd, zero-padded copy of the whole sequence by dynamic_slice.
DIL10 = (1, 2, 4, 8)


def tcn10_ref(x, ws):
    for w, d in zip(ws, DIL10):
        xp = jnp.pad(x, ((0, 0), (d, 0), (0, 0)))
        x = x + jnp.tanh(xp[:, :-d] @ w[0] + x @ w[1])
    return x


def tcn10_sp(bug):
    def f(x, ws):
        tl = x.shape[1]
        me = idx("sp")
        for w, d in zip(ws, DIL10):
            full = lax.all_gather(x, "sp", axis=1, tiled=True)
            if bug != "no-zero-pad":
                full = jnp.pad(full, ((0, 0), (d, 0), (0, 0)))
                start = me * tl
            else:
                start = me * tl - d  # clamped at device 0, no zeros
            if bug == "start-one-block-early":
                start = start - tl
            win = lax.dynamic_slice_in_dim(full, start, tl + d, 1)
            x = x + jnp.tanh(win[:, :tl] @ w[0] + x @ w[1])
        return x
    return f


WS10 = [R(2, 6, 6, scale=0.4) for _ in DIL10]
C.smap("s.tcn_halo_allgather_dynslice.sp8", {"sp": 8}, tcn10_sp, (P(None, "sp"), P()), P(None, "sp"),
       tcn10_ref, (R(2, 32, 6), WS10),
       bugs=[("no-zero-pad", ["wrong-offset"]), ("start-one-block-early", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 11. BatchNorm (training mode) over batch and sequence-parallel time with
#     its statistics reduced by psum_scatter over the channels then
#     all_gather'd, the variance two-pass (psum'd mean first).


def bn_ref(x, g, b):
    mu = x.mean((0, 1))
    var = jnp.mean(jnp.square(x - mu), (0, 1))
    return jax.nn.silu((x - mu) * lax.rsqrt(var + 1e-5) * g + b)


def bn_sp(bug):
    def f(x, g, b):
        n = 4
        cnt = x.shape[0] * x.shape[1] * (1 if bug == "local-count" else n)
        s1 = lax.psum_scatter(x.sum((0, 1)), "sp", scatter_dimension=0, tiled=True)
        mu = lax.all_gather(s1 / cnt, "sp", axis=0, tiled=True)
        s2 = lax.psum_scatter(jnp.square(x - mu).sum((0, 1)), "sp", scatter_dimension=0, tiled=True)
        var = lax.all_gather(s2, "sp", axis=0, tiled=True) / cnt
        return jax.nn.silu((x - mu) * lax.rsqrt(var + 1e-5) * g + b)
    return f


C.smap("s.batchnorm_stats_psum_scatter_allgather.sp4", {"sp": 4}, bn_sp, (P(None, "sp"), P(), P()),
       P(None, "sp"), bn_ref, (R(2, 32, 8) + 0.7, 1 + R(8, scale=0.1), R(8, scale=0.1)),
       bugs=[("local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. a causal-conv regressor step on sp4 with check_vma=True relying on
#     JAX to psum the gradients of the replicated parameters (the local
#     loss is varying over sp; no psum written by hand), optax.adamw.
OPT12 = optax.adamw(3e-3, weight_decay=0.1)


def c12_fwd(p, x, left):
    ext = jnp.concatenate([left, x], 1)
    h = jax.nn.gelu(ext[:, :-2] @ p["w"][0] + ext[:, 1:-1] @ p["w"][1] + x @ p["w"][2] + p["b"])
    return h @ p["wo"]


def c12_step(p, s, x, y):
    def loss(p):
        left = jnp.zeros((x.shape[0], 2, x.shape[2]), x.dtype)
        return jnp.sum(jnp.square(c12_fwd(p, x, left) - y)) / y.size
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def c12_sp(bug):
    def f(p, s, x, y):
        n = 4

        def loss(p):
            left = shift_from_left(x[:, -2:], "sp", n)
            return jnp.sum(jnp.square(c12_fwd(p, x, left) - y)) / (y.size * n)
        l, g = jax.value_and_grad(loss)(p)
        if bug == "extra-manual-psum":
            g = psum(g, "sp")
        u, s = OPT12.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "sp")
    return f


P12 = {"w": R(3, 4, 8, scale=0.4), "b": R(8, scale=0.1), "wo": R(8, 3, scale=0.4)}
S12 = OPT12.init(P12)
C.smap("s.train_causalconv_vma_autopsum_adamw.sp4", {"sp": 4}, c12_sp,
       (jax.tree.map(lambda _: P(), P12), jax.tree.map(lambda _: P(), S12), P(None, "sp"), P(None, "sp")),
       (jax.tree.map(lambda _: P(), P12), jax.tree.map(lambda _: P(), S12), P()), c12_step,
       (P12, S12, R(2, 16, 4), R(2, 16, 3)), check_vma=True,
       bugs=[("extra-manual-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.stft_logmel_cmvn.sp4", {"sp": 4}, (P(None, "sp"),), P(None, "sp"), logmel_ref, (R(B6, N6),))

C.gspmd("g.tcn_conv_dilated_stack.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), tcn_ref,
        (R(B1, T1, C1), WS1, BS1))

C.gspmd("g.patchtst_revin_patch_embed.dp2xsp4", {"dp": 2, "sp": 4},
        (P("dp", None, "sp"), P(), P(), P(), P(), P()), P("dp", None, "sp"), patchtst_ref, A5)

OPTG = optax.adamw(1e-3, weight_decay=0.01)


def convmod_step(p, s, x, y):
    def loss(p):
        return jnp.mean(jnp.square(conv_module_ref(x, p) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPTG.update(g, s, p)
    return optax.apply_updates(p, u), s, l


SG = OPTG.init(P2)
SSG = jax.tree.map(lambda _: P(), SG)
C.gspmd("g.train_conformer_convmodule_adamw.dp2xsp4", {"dp": 2, "sp": 4}, (SP2, SSG, P("dp", "sp"), P("dp", "sp")),
        (SP2, SSG, P()), convmod_step, (P2, SG, R(4, 32, D2), R(4, 32, D2)))

C.gspmd("g.relpos_attention.sp4", {"sp": 4}, (P(None, "sp"),) * 3 + (P(), P()), P(None, "sp"), relattn_ref, RA3)

C.finish()
