"""samples/fresh47: a 47th batch of programs as a user writes them, on the theme of signal processing and spectral methods under sharding in current JAX (jnp.fft with the batch sharded or with a transpose by all_to_all before an FFT along a sharded dim, Fourier neural operator spectral convolutions with truncated modes, WaveNet-style dilated causal convolutions with the time axis over sp and halos by ppermute, framing and overlap-add of a sharded signal, FIR filters and moving averages with halos, jax.grad training steps with optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a learned spectral filter on signals with the batch over dp8: rfft
    along the (unsharded) time axis, the lowest 8 modes multiplied by a
    complex gain kept as real / imaginary parameters, the rest zeroed,
    irfft; MSE against a target, jax.grad of the local loss, gradients
    pmean'd by hand (check_vma=False), optax.adam. Returns parameters,
    optimizer state and the pmean'd loss. Bugs: gradients not pmean'd, the
    modes taken from the high end of the spectrum (X[:, -m:]), gradients
    psum'd instead of pmean'd.
 2. a per-channel fractional delay applied in the frequency domain along a
    time axis sharded over sp4: all_to_all (channels split, time
    concatenated), fft, the phase ramp exp(-2 pi i f tau_c) with the
    channel delays sliced at the device's channel offset, ifft, real part,
    all_to_all back. Bugs: no all_to_all (the FFT of the local block of
    time), delays sliced at channel offset 0.
 3. a 1-D Fourier neural operator block (spectral conv with 5 kept modes
    and complex weights, plus a pointwise linear, GELU) with the spatial
    axis over sp4: all_to_all to put the batch on the devices and the whole
    grid local, rfft, modes, einsum, irfft, all_to_all back. Bugs: no
    all_to_all (rfft of the local block), the modes kept from the wrong end.
 4. a training step of a 1-layer FNO (lift, spectral conv + pointwise, GELU,
    projection) with the batch over dp and the hidden width over tp
    (check_vma=True): lift column-parallel, spectral and pointwise weights
    row-parallel on their input channels, the partial outputs (irfft'd
    first, so the psum is real) psum'd over tp, loss pmean'd over dp,
    jax.grad, plain SGD. Bugs: no psum over tp, GELU applied to the partial
    sums before the psum.
 5. a WaveNet stack of dilated causal convolutions (kernel 2, dilations 1,
    2, 4, 8, gated tanh * sigmoid, residual and skip 1x1s) with the time
    axis over sp4: each layer's halo is the last dilation*(k-1) samples of
    the left neighbour by a non-cyclic ppermute (zeros on device 0),
    lax.conv_general_dilated with rhs_dilation on the extended block. Bugs:
    the halo from the right neighbour, a halo of k-1 samples zero-padded to
    the dilation (too short), a cyclic ppermute (device 0 gets the end of
    the signal).
 6. a training step of a small WaveNet (kernel 3, dilations 1, 2, 4, taps
    written as shifted einsums) with the batch over dp and time over sp
    (2 x 4), loss summed locally and normalised by the global count,
    jax.grad, gradients psum'd over (dp, sp) by hand, optax.adamw. Bugs:
    gradients psum'd over dp only, gradients pmean'd (1/8 of the right
    scale).
 7. STFT-style framing and overlap-add of a signal whose time axis is over
    sp4 (frame 8, hop 4, Hann window, per-frequency gain between rfft and
    irfft): the frames need the first 4 samples of the right neighbour, the
    overlap-add tail of each block (4 samples) is added into the right
    neighbour's head. Bugs: overlap-add without the neighbour's tail, the
    framing halo from the left neighbour, the tail sent to the left.
 8. a causal FIR filter (5 taps, np.convolve semantics) on a bf16 signal
    over sp8, accumulation in f32: a 4-sample halo from the left
    neighbour. Bugs: halo from the right neighbour, halo by a cyclic
    ppermute (not zeroed on device 0), taps not flipped (correlation).
 9. a centred moving average (radius 3, zero padded, divided by 7) on
    channels-last signals over sp4, written with a cumsum over the block
    extended by halos from both neighbours. Bugs: the right halo taken from
    the left neighbour, halos of radius - 1 samples zero-padded (too short).
15. a 2-D FNO spectral conv (rfft2) keeping the modes at both ends of the
    full-FFT axis (X[:, :m1, :m2] and X[:, -m1:, :m2], two weight sets,
    written into a zero spectrum with .at[].set), batch over dp4, the output
    energy pmean'd. Bugs: the bottom block taken from rows m1:2*m1 (modes
    from the wrong end), the energy not pmean'd.
16. a spectral conv whose 8 kept modes are over tp4 (weights sharded on the
    mode axis): each rank dynamic_slices its modes at its offset, writes its
    product at that offset into a zero spectrum (dynamic_update_slice),
    complex psum over tp, irfft. Bugs: modes read at offset 0, no psum.
17. an FFT along a time axis over sp4 by all_gather, each device keeping its
    block of frequencies: a complex output sharded over frequency. Bugs: the
    local FFT without the all_gather, the frequency block at offset 0.
18. a spectral-magnitude loss (|fft| along a time axis over sp4 after an
    all_to_all) and its gradient by jax.value_and_grad through the
    all_to_all (check_vma=False), loss psum'd. Bugs: loss not psum'd,
    gradient psum'd (it is already time-sharded).
19. a depthwise FIR (per-channel taps, feature_group_count) whose halo is
    cut from an all_gather of the left-padded signal at the device offset,
    sp4. Bugs: the window starting one sample late, taps not reversed.
24. 15. written without scatters (the corner blocks concatenated with zero
    blocks), baseline likewise; same bugs.
25. an anti-causal look-ahead FIR whose halo correctly comes from the RIGHT
    neighbour. Bug: the halo from the left neighbour.
26. a circular FIR of a periodic signal with a CYCLIC ppermute halo (correct
    here) against a baseline by FFT products; 27. the same against a
    jnp.roll baseline. Bug (both): a non-cyclic halo.
GSPMD pairs (jax.jit with in/out shardings): 10. a log-power spectrogram
(Hann-windowed frames, rfft) with the batch over dp8; 11. an optax.adam
step of a 1-D FNO with the batch over dp4 and replicated parameters; 12. a
WaveNet stack written with lax.conv_general_dilated and explicit left
padding, time over sp4; 13. the magnitude of an FFT along a time axis
sharded over sp4; 14. a same-size moving average by jnp.convolve under
vmap, batch over dp2 and time over sp4; 20. the FNO-2d of 15. under jit,
batch over dp4; 21. the framing + overlap-add of 7. under jit, time over
sp4; 22. the spectral conv of 16. with the weights sharded on the mode axis
(tp4); 23. a complex rfft output with the batch over dp4.
Numerics: parameters are kept as real and imaginary parts; 17. and 23.
return complex values, and the manifest's max_abs_diff (fresh_lib casts to
float64) covers their real parts only; their imaginary parts were checked
by hand to agree exactly (17.'s offset-0 bug differs by 8.5).
Known misses: none (15.'s two bugs were missed while the interpreter had
no rule for a scatter on complex values, the baseline's .at[].set; both
are found since it has one; 24. is the same without scatters). See the manifest's "numerics" for each
pair's largest difference from the single-device run.
Run from the repository root: bash samples/gen/run_fresh47.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh47.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh47.py"
C = Corpus("samples/fresh47", SCRIPT, "samples/gen/run_fresh47.sh", sys.argv[1:])
rng, R, I = seeded(4747)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def right_perm(n, cyclic=False):
    """i -> i + 1 (each device receives from its left neighbour)."""
    return [(i, (i + 1) % n) for i in range(n if cyclic else n - 1)]


def left_perm(n, cyclic=False):
    """i -> i - 1 (each device receives from its right neighbour)."""
    return [(i, (i - 1) % n) for i in range(1 if not cyclic else 0, n)]


# ---------------------------------------------------------------------------
# 1. learned spectral filter, batch over dp8, adam step
T1, M1 = 32, 8
OPT1 = optax.adam(1e-2)


def spec_filter(p, x, lo=True):
    X = jnp.fft.rfft(x, axis=-1)
    keep = X[:, :M1] if lo else X[:, -M1:]
    Y = keep * (p["wr"] + 1j * p["wi"])
    Y = jnp.concatenate([Y, jnp.zeros((x.shape[0], X.shape[1] - M1), Y.dtype)], 1)
    return jnp.fft.irfft(Y, n=x.shape[-1], axis=-1)


def step1(p, s, x, t):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((spec_filter(p, x) - t) ** 2))(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def step1_dp(bug):
    def f(p, s, x, t):
        lo = bug != "modes-from-high-end"
        loss, g = jax.value_and_grad(lambda p: jnp.mean((spec_filter(p, x, lo) - t) ** 2))(p)
        if bug == "psum-grads":
            g = psum(g, "dp")
        elif bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(loss, "dp")
    return f


P1 = {"wr": 1.0 + R(M1, scale=0.3), "wi": R(M1, scale=0.3)}
S1 = OPT1.init(P1)
X1 = R(16, T1)
T1_ = np.asarray(jnp.fft.irfft(jnp.fft.rfft(X1)[:, :T1 // 2 + 1] * np.exp(-np.arange(T1 // 2 + 1) / 4.0), n=T1)).astype(np.float32)
S1SPEC = jax.tree.map(lambda _: P(), S1)
C.smap("s.rfft_learned_spectral_filter_adam.dp8", {"dp": 8}, step1_dp,
       ({"wr": P(), "wi": P()}, S1SPEC, P("dp"), P("dp")), ({"wr": P(), "wi": P()}, S1SPEC, P()),
       step1, (P1, S1, X1, T1_),
       bugs=[("grads-not-pmeaned", ["missing-all-reduce"]), ("modes-from-high-end", ["wrong-slice"]),
             ("psum-grads", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. per-channel fractional delay by FFT along the sharded time axis
C2, T2 = 8, 32


def frac_delay(x, tau):
    f = jnp.fft.fftfreq(x.shape[-1])
    ph = jnp.exp(-2j * jnp.pi * f[None, :] * tau[:, None])
    return jnp.real(jnp.fft.ifft(jnp.fft.fft(x, axis=-1) * ph, axis=-1))


def frac_delay_sp(bug):
    def f(x, tau):
        n = 4
        cl = x.shape[0] // n
        if bug == "no-a2a-before-fft":
            return frac_delay(x, tau)
        xt = lax.all_to_all(x, "sp", split_axis=0, concat_axis=1, tiled=True)  # (C/n, T)
        off = 0 if bug == "delay-offset-zero" else idx("sp") * cl
        y = frac_delay(xt, lax.dynamic_slice_in_dim(tau, off, cl))
        return lax.all_to_all(y, "sp", split_axis=1, concat_axis=0, tiled=True)
    return f


C.smap("s.fft_sharded_time_a2a_fractional_delay.sp4", {"sp": 4}, frac_delay_sp, (P(None, "sp"), P()),
       P(None, "sp"), frac_delay, (R(C2, T2), np.linspace(0.3, 5.7, C2).astype(np.float32)),
       bugs=[("no-a2a-before-fft", ["missing-collective"]), ("delay-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. FNO-1d block, spatial axis over sp4, all_to_all to batch-sharded
B3, N3, W3, M3 = 4, 32, 6, 5


def fno_block(x, wr, wi, wp, b, high=False):
    X = jnp.fft.rfft(x, axis=1)  # (b, N/2+1, W)
    Xm = X[:, -M3:] if high else X[:, :M3]
    Y = jnp.einsum("bmi,iom->bmo", Xm, wr + 1j * wi)
    Y = jnp.pad(Y, ((0, 0), (0, X.shape[1] - M3), (0, 0)))
    y = jnp.fft.irfft(Y, n=x.shape[1], axis=1)
    return jax.nn.gelu(y + jnp.einsum("bni,io->bno", x, wp) + b)


def fno_sp(bug):
    def f(x, wr, wi, wp, b):
        if bug == "no-a2a":
            return fno_block(x, wr, wi, wp, b)
        xb = lax.all_to_all(x, "sp", split_axis=0, concat_axis=1, tiled=True)  # (B/4, N, W)
        y = fno_block(xb, wr, wi, wp, b, high=bug == "modes-wrong-end")
        return lax.all_to_all(y, "sp", split_axis=1, concat_axis=0, tiled=True)
    return f


C.smap("s.fno1d_block_space_sp_a2a_to_batch.sp4", {"sp": 4}, fno_sp, (P(None, "sp"), P(), P(), P(), P()),
       P(None, "sp"), fno_block,
       (R(B3, N3, W3), R(W3, W3, M3, scale=0.4), R(W3, W3, M3, scale=0.4), R(W3, W3, scale=0.4), R(W3, scale=0.1)),
       bugs=[("no-a2a", ["missing-collective"]), ("modes-wrong-end", ["wrong-slice"])])

# ---------------------------------------------------------------------------
# 4. FNO training step, batch over dp, width over tp (check_vma=True), SGD
B4, N4, CI4, W4, M4 = 8, 16, 2, 8, 4
LR4 = 0.05


def fno_model(p, x, tp_sum=lambda y: y, act_first=False):
    h = x @ p["lift"]  # (b, N, W[/tp])
    H = jnp.fft.rfft(h, axis=1)[:, :M4]
    O = jnp.einsum("bmi,iom->bmo", H, p["wr"] + 1j * p["wi"])
    o = jnp.fft.irfft(jnp.pad(O, ((0, 0), (0, N4 // 2 + 1 - M4), (0, 0))), n=N4, axis=1)
    z = o + jnp.einsum("bni,io->bno", h, p["wp"])
    z = tp_sum(jax.nn.gelu(z)) + p["b"] if act_first else jax.nn.gelu(tp_sum(z) + p["b"])
    return (z @ p["q"])[..., 0]


def fno_step(p, x, t):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((fno_model(p, x) - t) ** 2))(p)
    return jax.tree.map(lambda a, b: a - LR4 * b, p, g), loss


def fno_step_tp(bug):
    def f(p, x, t):
        def loss(p):
            tp_sum = (lambda y: y) if bug == "no-psum-tp" else (lambda y: psum(y, "tp"))
            y = fno_model(p, x, tp_sum, act_first=bug == "gelu-before-psum")
            if bug == "no-psum-tp":  # check_vma wants the P() loss invariant over tp too
                return pmean(jnp.mean((y - t) ** 2), ("dp", "tp"))
            return pmean(jnp.mean((y - t) ** 2), "dp")
        l, g = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda a, b: a - LR4 * b, p, g), l
    return f


P4 = {"lift": R(CI4, W4, scale=0.7), "wr": R(W4, W4, M4, scale=0.3), "wi": R(W4, W4, M4, scale=0.3),
      "wp": R(W4, W4, scale=0.35), "b": R(W4, scale=0.1), "q": R(W4, 1, scale=0.4)}
SP4 = {"lift": P(None, "tp"), "wr": P("tp"), "wi": P("tp"), "wp": P("tp"), "b": P(), "q": P()}
C.smap("s.fno1d_train_width_tp_sgd.dp2xtp4", {"dp": 2, "tp": 4}, fno_step_tp, (SP4, P("dp"), P("dp")), (SP4, P()),
       fno_step, (P4, R(B4, N4, CI4), R(B4, N4)), check_vma=True,
       bugs=[("no-psum-tp", ["missing-all-reduce"]), ("gelu-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 5. WaveNet dilated causal conv stack, time over sp4
B5, T5, C5, K5 = 2, 64, 4, 2
DIL5 = (1, 2, 4, 8)


def causal_conv(xe, w, d):
    """xe (b, h + L, c) already extended on the left by h = d*(k-1)."""
    return lax.conv_general_dilated(xe, w, (1,), "VALID", rhs_dilation=(d,),
                                    dimension_numbers=("NWC", "WIO", "NWC"))


def wavenet(p, x, halo=None):
    skip = 0.0
    for i, d in enumerate(DIL5):
        h = d * (K5 - 1)
        xe = jnp.pad(x, ((0, 0), (h, 0), (0, 0))) if halo is None else halo(x, h, d)
        a = causal_conv(xe, p["wf"][i], d)
        z = jnp.tanh(a[..., :C5]) * jax.nn.sigmoid(a[..., C5:])
        skip = skip + z @ p["ws"][i]
        x = x + z @ p["wr"][i]
    return x, skip


def wavenet_sp(bug):
    n = 4

    def halo(x, h, d):
        if bug == "halo-too-short":
            got = lax.ppermute(x[:, -(K5 - 1):], "sp", right_perm(n))
            got = jnp.pad(got, ((0, 0), (h - (K5 - 1), 0), (0, 0)))
        elif bug == "halo-from-right":
            got = lax.ppermute(x[:, :h], "sp", left_perm(n))
        elif bug == "cyclic-halo":
            got = lax.ppermute(x[:, -h:], "sp", right_perm(n, cyclic=True))
        else:
            got = lax.ppermute(x[:, -h:], "sp", right_perm(n))
        return jnp.concatenate([got, x], 1)

    def f(p, x):
        return wavenet(p, x, halo)
    return f


P5 = {"wf": R(len(DIL5), K5, C5, 2 * C5, scale=0.5), "ws": R(len(DIL5), C5, C5, scale=0.4),
      "wr": R(len(DIL5), C5, C5, scale=0.4)}
SPEC5 = {"wf": P(), "ws": P(), "wr": P()}
C.smap("s.wavenet_dilated_causal_halo_ppermute.sp4", {"sp": 4}, wavenet_sp, (SPEC5, P(None, "sp")),
       (P(None, "sp"), P(None, "sp")), wavenet, (P5, R(B5, T5, C5)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("halo-too-short", ["wrong-slice"]),
             ("cyclic-halo", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. WaveNet training step, batch over dp, time over sp (2 x 4), adamw
B6, T6, C6, K6 = 4, 32, 3, 3
DIL6 = (1, 2, 4)
OPT6 = optax.adamw(3e-3, weight_decay=0.01)


def wn6(p, x, shift=None):
    """Taps as shifted einsums: y[t] = sum_j w[j] . x[t - j*d]."""
    h = x @ p["inp"]
    for i, d in enumerate(DIL6):
        ext = (K6 - 1) * d
        he = jnp.pad(h, ((0, 0), (ext, 0), (0, 0))) if shift is None else shift(h, ext)
        L = h.shape[1]
        a = sum(jnp.einsum("btc,cd->btd", he[:, ext - j * d: ext - j * d + L], p["w"][i, j]) for j in range(K6))
        h = h + jnp.tanh(a[..., :C6]) * jax.nn.sigmoid(a[..., C6:])
    return (h @ p["out"])[..., 0]


def step6(p, s, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((wn6(p, x) - y) ** 2))(p)
    u, s = OPT6.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def step6_sm(bug):
    def shift(h, ext):
        got = lax.ppermute(h[:, -ext:], "sp", right_perm(4))
        return jnp.concatenate([got, h], 1)

    def f(p, s, x, y):
        count = B6 * T6

        def loss(p):
            return jnp.sum((wn6(p, x, shift) - y) ** 2) / count
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grads-psum-dp-only":
            g = psum(g, "dp")
        elif bug == "grads-pmean":
            g = pmean(g, ("dp", "sp"))
        else:
            g = psum(g, ("dp", "sp"))
        u, s = OPT6.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "sp"))
    return f


P6 = {"inp": R(1, C6, scale=0.8), "w": R(len(DIL6), K6, C6, 2 * C6, scale=0.4), "out": R(C6, 1, scale=0.5)}
S6 = OPT6.init(P6)
SP6 = {k: P() for k in P6}
SS6 = jax.tree.map(lambda _: P(), S6)
X6 = R(B6, T6, 1)
Y6 = np.roll(X6[..., 0], 1, axis=1) * 0.5
C.smap("s.wavenet_train_adamw_dp_sp.dp2xsp4", {"dp": 2, "sp": 4}, step6_sm,
       (SP6, SS6, P("dp", "sp"), P("dp", "sp")), (SP6, SS6, P()), step6, (P6, S6, X6, Y6),
       bugs=[("grads-psum-dp-only", ["missing-all-reduce"]), ("grads-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. framing + overlap-add of a sharded signal (frame 8, hop 4)
B7, T7, F7, H7 = 2, 64, 8, 4
WIN7 = np.hanning(F7 + 1)[:-1].astype(np.float32)  # periodic Hann


def frame_ola(x, gain):
    """x (b, T): frames at 0, H, ..., T - H of x padded by F - H zeros on the
    right, each windowed, filtered in the frequency domain, windowed again and
    overlap-added; the result cut to T."""
    b, t = x.shape
    xp = jnp.pad(x, ((0, 0), (0, F7 - H7)))
    nf = t // H7
    fr = jnp.stack([xp[:, j * H7: j * H7 + F7] for j in range(nf)], 1) * WIN7
    fr = jnp.fft.irfft(jnp.fft.rfft(fr, axis=-1) * gain, n=F7, axis=-1) * WIN7
    y = jnp.zeros((b, t + F7 - H7), x.dtype)
    for j in range(nf):
        y = y.at[:, j * H7: j * H7 + F7].add(fr[:, j])
    return y[:, :t]


def frame_ola_sp(bug):
    n = 4

    def f(x, gain):
        b, L = x.shape
        if bug == "frame-halo-from-left":
            nxt = lax.ppermute(x[:, -(F7 - H7):], "sp", right_perm(n))
        else:
            nxt = lax.ppermute(x[:, :F7 - H7], "sp", left_perm(n))  # zeros on the last device
        xe = jnp.concatenate([x, nxt], 1)  # (b, L + F - H)
        nf = L // H7
        fr = jnp.stack([xe[:, j * H7: j * H7 + F7] for j in range(nf)], 1) * WIN7
        fr = jnp.fft.irfft(jnp.fft.rfft(fr, axis=-1) * gain, n=F7, axis=-1) * WIN7
        y = jnp.zeros((b, L + F7 - H7), x.dtype)
        for j in range(nf):
            y = y.at[:, j * H7: j * H7 + F7].add(fr[:, j])
        body, tail = y[:, :L], y[:, L:]
        if bug == "ola-no-neighbour-tail":
            return body
        perm = left_perm(n) if bug == "tail-sent-left" else right_perm(n)
        got = lax.ppermute(tail, "sp", perm)
        return body.at[:, :F7 - H7].add(got)
    return f


C.smap("s.stft_frames_overlap_add_halo_tail.sp4", {"sp": 4}, frame_ola_sp, (P(None, "sp"), P()), P(None, "sp"),
       frame_ola, (R(B7, T7), (0.5 + np.linspace(1.0, 0.2, F7 // 2 + 1)).astype(np.float32)),
       bugs=[("ola-no-neighbour-tail", ["missing-collective"]), ("frame-halo-from-left", ["wrong-permutation"]),
             ("tail-sent-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. causal FIR on a bf16 signal over sp8
B8, T8, K8 = 4, 64, 5


def fir(x, taps):
    xf = x.astype(jnp.float32)
    return jax.vmap(lambda r: jnp.convolve(r, taps, mode="full")[:r.shape[0]])(xf)


def fir_sp(bug):
    n = 8

    def f(x, taps):
        xf = x.astype(jnp.float32)
        h = K8 - 1
        if bug == "halo-from-right":
            got = lax.ppermute(xf[:, :h], "sp", left_perm(n))
        else:
            got = lax.ppermute(xf[:, -h:], "sp", right_perm(n, cyclic=bug == "halo-cyclic"))
        xe = jnp.concatenate([got, xf], 1)
        L = x.shape[1]
        w = taps if bug == "taps-not-flipped" else taps[::-1]
        # y[t] = sum_k taps[k] x[t-k] = sum_j taps[::-1][j] xe[t + j]
        return sum(w[j] * xe[:, j: j + L] for j in range(K8))
    return f


C.smap("s.fir_causal_bf16_halo.sp8", {"sp": 8}, fir_sp, (P(None, "sp"), P()), P(None, "sp"), fir,
       (R(B8, T8, dt=np.float32).astype(jnp.bfloat16), np.array([0.5, 0.3, -0.2, 0.15, 0.1], np.float32)),
       bugs=[("halo-from-right", ["wrong-permutation"]), ("halo-cyclic", ["wrong-permutation"]),
             ("taps-not-flipped", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 9. centred moving average by cumsum with two-sided halos, sp4
B9, T9, C9, R9 = 3, 32, 2, 3


def movavg(x):
    xp = jnp.pad(x, ((0, 0), (R9, R9), (0, 0)))
    return sum(xp[:, j: j + x.shape[1]] for j in range(2 * R9 + 1)) / (2 * R9 + 1)


def movavg_sp(bug):
    n = 4

    def f(x):
        L = x.shape[1]
        r = R9 - 1 if bug == "halo-too-short" else R9
        left = lax.ppermute(x[:, -r:], "sp", right_perm(n))
        if bug == "right-halo-from-left":
            right = lax.ppermute(x[:, -r:], "sp", right_perm(n))
        else:
            right = lax.ppermute(x[:, :r], "sp", left_perm(n))
        pad = R9 - r
        xe = jnp.concatenate([jnp.pad(left, ((0, 0), (pad, 0), (0, 0))), x,
                              jnp.pad(right, ((0, 0), (0, pad), (0, 0)))], 1)
        cs = jnp.concatenate([jnp.zeros_like(xe[:, :1]), jnp.cumsum(xe, 1)], 1)
        return (cs[:, 2 * R9 + 1: 2 * R9 + 1 + L] - cs[:, :L]) / (2 * R9 + 1)
    return f


C.smap("s.moving_average_cumsum_two_sided_halo.sp4", {"sp": 4}, movavg_sp, (P(None, "sp"),), P(None, "sp"), movavg,
       (R(B9, T9, C9),), bugs=[("right-halo-from-left", ["wrong-permutation"]), ("halo-too-short", ["wrong-slice"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
# 10. log-power spectrogram, batch over dp8
def logspec(x):
    nf = (x.shape[1] - F7) // H7 + 1
    fr = jnp.stack([x[:, j * H7: j * H7 + F7] for j in range(nf)], 1) * WIN7
    return jnp.log(jnp.abs(jnp.fft.rfft(fr, axis=-1)) ** 2 + 1e-3)


C.gspmd("g.log_power_spectrogram_batch.dp8", {"dp": 8}, (P("dp"),), P("dp"), logspec, (R(16, 40),))


# 11. adam step of an FNO, batch over dp4
OPT11 = optax.adam(5e-3)


def step11(p, s, x, t):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((fno_model(p, x) - t) ** 2))(p)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


S11 = OPT11.init(P4)
C.gspmd("g.fno1d_adam_step_batch.dp4", {"dp": 4}, ({k: P() for k in P4}, jax.tree.map(lambda _: P(), S11),
                                                   P("dp"), P("dp")),
        ({k: P() for k in P4}, jax.tree.map(lambda _: P(), S11), P()), step11, (P4, S11, R(B4, N4, CI4), R(B4, N4)))


# 12. WaveNet with explicit left padding, time over sp4
C.gspmd("g.wavenet_conv_dilated_time.sp4", {"sp": 4}, (SPEC5, P(None, "sp")), (P(None, "sp"), P(None, "sp")),
        wavenet, (P5, R(B5, T5, C5)))


# 13. |FFT| along a time axis sharded over sp4
def fft_mag(x):
    return jnp.abs(jnp.fft.fft(x, axis=1))


C.gspmd("g.fft_magnitude_sharded_time.sp4", {"sp": 4}, (P(None, "sp"),), P(None, "sp"), fft_mag, (R(4, 32),))


# 14. same-size moving average by jnp.convolve, dp2 x sp4
def conv_same(x):
    k = jnp.ones(5, x.dtype) / 5
    return jax.vmap(lambda r: jnp.convolve(r, k, mode="same"))(x)


C.gspmd("g.moving_average_convolve_same.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),), P("dp", "sp"), conv_same,
        (R(4, 64),))

# ---------------------------------------------------------------------------
# 15. FNO-2d spectral conv keeping the modes at both ends of the full-FFT
#     axis, batch over dp4; the output energy pmean'd
B15, H15, W15, C15, M15a, M15b = 8, 16, 16, 3, 3, 4


def fno2d(x, w1r, w1i, w2r, w2i, bottom_from_start=False):
    X = jnp.fft.rfft2(x, axes=(1, 2))  # (b, H, W/2+1, c)
    top = X[:, :M15a, :M15b]
    bot = X[:, M15a:2 * M15a, :M15b] if bottom_from_start else X[:, -M15a:, :M15b]
    Y = jnp.zeros(X.shape[:3] + (C15,), X.dtype)
    Y = Y.at[:, :M15a, :M15b].set(jnp.einsum("bxyi,ioxy->bxyo", top, w1r + 1j * w1i))
    Y = Y.at[:, -M15a:, :M15b].set(jnp.einsum("bxyi,ioxy->bxyo", bot, w2r + 1j * w2i))
    return jnp.fft.irfft2(Y, s=(H15, W15), axes=(1, 2))


def fno2d_energy(x, *w):
    y = fno2d(x, *w)
    return y, jnp.mean(y ** 2)


def fno2d_dp(bug):
    def f(x, *w):
        y = fno2d(x, *w, bottom_from_start=bug == "bottom-modes-from-start")
        e = jnp.mean(y ** 2)
        return y, (e if bug == "energy-not-pmeaned" else pmean(e, "dp"))
    return f


W15S = tuple(R(C15, C15, M15a, M15b, scale=0.4) for _ in range(4))
C.smap("s.fno2d_modes_both_ends_energy.dp4", {"dp": 4}, fno2d_dp, (P("dp"),) + (P(),) * 4, (P("dp"), P()),
       fno2d_energy, (R(B15, H15, W15, C15),) + W15S,
       bugs=[("bottom-modes-from-start", ["wrong-slice"]), ("energy-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 16. spectral conv with the kept modes over tp4: each rank multiplies its 2
#     modes (weights sharded on the mode axis), writes them at its offset into
#     a zero spectrum, complex psum over tp, irfft
B16, N16, C16, M16 = 4, 32, 4, 8


def spec_modes(x, wr, wi):
    X = jnp.fft.rfft(x, axis=1)[:, :M16]
    Y = jnp.einsum("bmi,mio->bmo", X, wr + 1j * wi)
    Y = jnp.pad(Y, ((0, 0), (0, N16 // 2 + 1 - M16), (0, 0)))
    return jnp.fft.irfft(Y, n=N16, axis=1)


def spec_modes_tp(bug):
    def f(x, wr, wi):
        ml = wr.shape[0]
        off = idx("tp") * ml
        X = jnp.fft.rfft(x, axis=1)
        Xm = lax.dynamic_slice_in_dim(X, 0 if bug == "modes-at-offset-zero" else off, ml, axis=1)
        Y = jnp.einsum("bmi,mio->bmo", Xm, wr + 1j * wi)
        full = lax.dynamic_update_slice_in_dim(jnp.zeros_like(X[..., :C16]), Y, off, axis=1)
        if bug != "no-psum":
            full = psum(full, "tp")
        return jnp.fft.irfft(full, n=N16, axis=1)
    return f


C.smap("s.spectral_conv_modes_over_tp_complex_psum.tp4", {"tp": 4}, spec_modes_tp, (P(), P("tp"), P("tp")), P(),
       spec_modes, (R(B16, N16, C16), R(M16, C16, C16, scale=0.5), R(M16, C16, C16, scale=0.5)),
       bugs=[("modes-at-offset-zero", ["wrong-offset"]), ("no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 17. complex outputs: the FFT of a time axis over sp4 by all_gather, each
#     device keeping its block of frequencies (output complex, frequency over sp)
B17, T17 = 3, 32


def fft_full(x):
    return jnp.fft.fft(x * np.hanning(T17).astype(np.float32), axis=1)


def fft_gather_sp(bug):
    def f(x):
        L = x.shape[1]
        win = lax.dynamic_slice_in_dim(jnp.asarray(np.hanning(T17).astype(np.float32)), idx("sp") * L, L)
        if bug == "no-gather-local-fft":
            return jnp.fft.fft(x * win, axis=1)
        xg = lax.all_gather(x * win, "sp", axis=1, tiled=True)
        F = jnp.fft.fft(xg, axis=1)
        return lax.dynamic_slice_in_dim(F, 0 if bug == "freq-block-offset-zero" else idx("sp") * L, L, axis=1)
    return f


C.smap("s.fft_allgather_time_complex_freq_blocks.sp4", {"sp": 4}, fft_gather_sp, (P(None, "sp"),), P(None, "sp"),
       fft_full, (R(B17, T17),),
       bugs=[("no-gather-local-fft", ["missing-collective"]), ("freq-block-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. a spectral-magnitude loss and its gradient through the all_to_all
#     transpose (time over sp4): loss psum'd, gradient returned time-sharded
C18, T18 = 4, 32


def spec_loss(pred, tgt):
    return jnp.sum((jnp.abs(jnp.fft.fft(pred, axis=1)) - jnp.abs(jnp.fft.fft(tgt, axis=1))) ** 2) / (C18 * T18)


def spec_loss_grad(pred, tgt):
    return jax.value_and_grad(spec_loss)(pred, tgt)


def spec_loss_sp(bug):
    def f(pred, tgt):
        def local(pred):
            a = lax.all_to_all(pred, "sp", split_axis=0, concat_axis=1, tiled=True)
            b = lax.all_to_all(tgt, "sp", split_axis=0, concat_axis=1, tiled=True)
            return jnp.sum((jnp.abs(jnp.fft.fft(a, axis=1)) - jnp.abs(jnp.fft.fft(b, axis=1))) ** 2) / (C18 * T18)
        l, g = jax.value_and_grad(local)(pred)
        if bug == "grad-psummed":
            g = psum(g, "sp")
        return (l if bug == "loss-not-psummed" else psum(l, "sp")), g
    return f


C.smap("s.spectral_magnitude_loss_grad_a2a.sp4", {"sp": 4}, spec_loss_sp, (P(None, "sp"), P(None, "sp")),
       (P(), P(None, "sp")), spec_loss_grad, (R(C18, T18), R(C18, T18)),
       bugs=[("loss-not-psummed", ["missing-all-reduce"]), ("grad-psummed", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 19. a depthwise FIR (per-channel taps, feature_group_count) whose halo is
#     cut from an all_gather of the whole signal, time over sp4
B19, T19, C19, K19 = 2, 32, 3, 4


def dw_fir(x, taps):
    """x (b, T, c), taps (K, c): y[t, c] = sum_k taps[k, c] x[t - k, c]."""
    w = taps[::-1, None, :]  # (K, 1, c) WIO
    return lax.conv_general_dilated(x, w, (1,), [(K19 - 1, 0)], dimension_numbers=("NWC", "WIO", "NWC"),
                                    feature_group_count=C19)


def dw_fir_sp(bug):
    def f(x, taps):
        L = x.shape[1]
        h = K19 - 1
        xg = lax.all_gather(x, "sp", axis=1, tiled=True)
        xg = jnp.pad(xg, ((0, 0), (h, 0), (0, 0)))
        start = idx("sp") * L + (1 if bug == "window-start-plus-one" else 0)
        seg = lax.dynamic_slice_in_dim(xg, start, L + h, axis=1)
        w = (taps if bug == "taps-not-reversed" else taps[::-1])[:, None, :]
        return lax.conv_general_dilated(seg, w, (1,), "VALID", dimension_numbers=("NWC", "WIO", "NWC"),
                                        feature_group_count=C19)
    return f


C.smap("s.depthwise_fir_allgather_halo.sp4", {"sp": 4}, dw_fir_sp, (P(None, "sp"), P()), P(None, "sp"), dw_fir,
       (R(B19, T19, C19), R(K19, C19, scale=0.5)),
       bugs=[("window-start-plus-one", ["wrong-offset"]), ("taps-not-reversed", ["wrong-order"])])

# more GSPMD pairs
# 20. the FNO-2d of 15. under jit, batch over dp4
C.gspmd("g.fno2d_modes_both_ends_batch.dp4", {"dp": 4}, (P("dp"),) + (P(),) * 4, P("dp"), fno2d,
        (R(B15, H15, W15, C15),) + W15S)
# 21. framing + overlap-add of 7. under jit, time over sp4
C.gspmd("g.stft_frames_overlap_add_time.sp4", {"sp": 4}, (P(None, "sp"), P()), P(None, "sp"), frame_ola,
        (R(B7, T7), (0.5 + np.linspace(1.0, 0.2, F7 // 2 + 1)).astype(np.float32)))
# 22. the modes-over-tp spectral conv of 16. under jit, weights sharded on the mode axis
C.gspmd("g.spectral_conv_weights_modes_tp.tp4", {"tp": 4}, (P(), P("tp"), P("tp")), P(), spec_modes,
        (R(B16, N16, C16), R(M16, C16, C16, scale=0.5), R(M16, C16, C16, scale=0.5)))
# 23. complex rfft output, batch over dp4
C.gspmd("g.rfft_complex_output_batch.dp4", {"dp": 4}, (P("dp"),), P("dp"), lambda x: jnp.fft.rfft(x, axis=-1),
        (R(8, 16),))

# ---------------------------------------------------------------------------
# 24. the FNO-2d of 15. written without scatters: the kept spectrum built by
#     concatenating the two corner blocks with zeros (batch over dp4)
def fno2d_cat(x, w1r, w1i, w2r, w2i, bottom_from_start=False):
    X = jnp.fft.rfft2(x, axes=(1, 2))
    hh, ww = X.shape[1], X.shape[2]
    top = jnp.einsum("bxyi,ioxy->bxyo", X[:, :M15a, :M15b], w1r + 1j * w1i)
    bsrc = X[:, M15a:2 * M15a, :M15b] if bottom_from_start else X[:, hh - M15a:, :M15b]
    bot = jnp.einsum("bxyi,ioxy->bxyo", bsrc, w2r + 1j * w2i)
    mid = jnp.zeros((x.shape[0], hh - 2 * M15a, M15b, C15), X.dtype)
    Y = jnp.concatenate([top, mid, bot], 1)
    Y = jnp.concatenate([Y, jnp.zeros((x.shape[0], hh, ww - M15b, C15), X.dtype)], 2)
    return jnp.fft.irfft2(Y, s=(H15, W15), axes=(1, 2))


def fno2d_cat_dp(bug):
    def f(x, *w):
        y = fno2d_cat(x, *w, bottom_from_start=bug == "bottom-modes-from-start")
        e = jnp.mean(y ** 2)
        return y, (e if bug == "energy-not-pmeaned" else pmean(e, "dp"))
    return f


def fno2d_cat_energy(x, *w):
    y = fno2d_cat(x, *w)
    return y, jnp.mean(y ** 2)


C.smap("s.fno2d_concat_corners_energy.dp4", {"dp": 4}, fno2d_cat_dp, (P("dp"),) + (P(),) * 4, (P("dp"), P()),
       fno2d_cat_energy, (R(B15, H15, W15, C15),) + W15S,
       bugs=[("bottom-modes-from-start", ["wrong-slice"]), ("energy-not-pmeaned", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 25. an anti-causal (look-ahead) FIR, y[t] = sum_k h[k] x[t + k]: here the
#     halo correctly comes from the RIGHT neighbour (zeros on the last
#     device), time over sp4; written with jnp.roll-free slicing in the body
B25, T25, K25 = 3, 32, 4


def lookahead_fir(x, h):
    xp = jnp.pad(x, ((0, 0), (0, K25 - 1)))
    return sum(h[k] * xp[:, k: k + x.shape[1]] for k in range(K25))


def lookahead_sp(bug):
    def f(x, h):
        L = x.shape[1]
        perm = right_perm(4) if bug == "halo-from-left" else left_perm(4)
        nxt = lax.ppermute(x[:, :K25 - 1] if bug != "halo-from-left" else x[:, -(K25 - 1):], "sp", perm)
        xe = jnp.concatenate([x, nxt], 1)
        return jnp.einsum("k,bkt->bt", h, jnp.stack([xe[:, k: k + L] for k in range(K25)], 1))
    return f


C.smap("s.lookahead_fir_halo_from_right.sp4", {"sp": 4}, lookahead_sp, (P(None, "sp"), P()), P(None, "sp"),
       lookahead_fir, (R(B25, T25), np.array([0.4, -0.3, 0.2, 0.1], np.float32)),
       bugs=[("halo-from-left", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 26. a circular FIR of a periodic signal: the baseline multiplies spectra
#     (fft of the signal and of the zero-padded taps), the distributed body
#     uses a CYCLIC ppermute halo (correct here: the signal wraps), sp8
B26, T26, K26 = 2, 64, 5


def circ_fft(x, h):
    hp = jnp.pad(h, (0, x.shape[1] - K26))
    return jnp.real(jnp.fft.ifft(jnp.fft.fft(x, axis=1) * jnp.fft.fft(hp), axis=1))


def circ_sp(bug):
    def f(x, h):
        L = x.shape[1]
        got = lax.ppermute(x[:, -(K26 - 1):], "sp", right_perm(8, cyclic=bug != "non-cyclic-halo"))
        xe = jnp.concatenate([got, x], 1)
        return sum(h[k] * xe[:, K26 - 1 - k: K26 - 1 - k + L] for k in range(K26))
    return f


C.smap("s.circular_fir_cyclic_halo_vs_fft.sp8", {"sp": 8}, circ_sp, (P(None, "sp"), P()), P(None, "sp"), circ_fft,
       (R(B26, T26), np.array([0.3, 0.25, -0.2, 0.15, 0.1], np.float32)),
       bugs=[("non-cyclic-halo", ["wrong-permutation"])])


# 27. the same circular FIR with a jnp.roll baseline
def circ_roll(x, h):
    return sum(h[k] * jnp.roll(x, k, axis=1) for k in range(K26))


C.smap("s.circular_fir_cyclic_halo_vs_roll.sp8", {"sp": 8}, circ_sp, (P(None, "sp"), P()), P(None, "sp"), circ_roll,
       (R(B26, T26), np.array([0.3, 0.25, -0.2, 0.15, 0.1], np.float32)),
       bugs=[("non-cyclic-halo", ["wrong-permutation"])])

C.finish()
