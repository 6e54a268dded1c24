"""samples/fresh99: a 99th batch of programs as a user writes them, on the theme of structured and factorised weight matrices in training under tensor, fully-sharded and data parallelism (Monarch and butterfly matrices, Kronecker-factored layers, low-rank factorisations with FSDP, block-diagonal grouped layers, tensor-train layers, block-circulant and Toeplitz layers by FFT, hypernetwork-generated weights, tied encoder / decoder weights), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a Monarch matrix (64 = 8 x 8): block-diagonal R (8 blocks of 8 x 8),
    the transpose permutation, block-diagonal L; R's blocks over tp4 with
    the input, the permutation by a tiled all_to_all over tp (split the
    output index, concatenate the block index), L replicated and its blocks
    sliced at the rank's offset. Bugs: the all_to_all'd block reshaped
    instead of transposed, L's blocks sliced one shard off, the permutation
    left out (block-diagonal times block-diagonal).
 2. a Monarch layer training step (dp2 x tp4, check_vma=True): GELU of the
    Monarch product, MSE to a target, loss psum'd over tp and pmean'd over
    dp, jax.value_and_grad inside the body, optax.sgd with momentum on the
    block-sharded factors. Bugs: reshape instead of transpose after the
    all_to_all, loss normalised by the local element count (gradients 4x).
 3. a Kronecker-factored layer y = x (A kron B) as reshape / einsum: the
    major input index and A's rows over tp4, batch over dp, B replicated;
    the partial products reduce-scattered over the output's major index
    (psum_scatter). Bugs: output indices in the wrong order (B kron A),
    scattered over the minor index, B used transposed.
 4. a low-rank layer W = U V trained under FSDP x TP (check_vma=True): U's
    rows and V's columns over dp (all_gather'd where used), the rank over
    tp (psum'd), loss pmean'd over dp, optax.adamw. Bugs: the rank not
    reduced (the loss then pmean'd over dp and tp so the output is
    replicated), the loss psum'd over dp.
 5. a grouped (block-diagonal) linear layer, 8 groups with the features
    over tp4 (2 groups per device), batch over dp, the group weights and
    biases replicated and dynamic_slice'd at the rank's group offset. Bugs:
    offset one shard off, offset from the dp index, bias at offset 0.
 6. a tensor-train layer (64 -> 64, modes 4 x 4 x 4, TT ranks 8, 8), the
    first TT rank over tp4 (first core's last dim and second core's first
    dim), psum after the second core, batch over dp. Bugs: rank not
    reduced, input modes reversed, psum over dp.
 7. a block-circulant layer (4 x 4 blocks of 8 x 8 circulants) by rfft /
    irfft, the input blocks over tp4, partial outputs psum'd, batch over dp.
    Bugs: correlation instead of convolution (conjugated kernel spectrum),
    no psum.
 8. a causal Toeplitz long convolution (Hyena-style, kernel as long as the
    sequence) by FFT of length 2T, sequence over sp4: the input
    all_gather'd, the full convolution computed, the own block sliced.
    Bugs: FFT of length T (circular wrap-around), the block at offset 0.
 9. a hypernetwork-generated layer: a layer embedding z times a replicated
    hypernetwork H gives W (16 x 32) flat; outputs over tp4 so each rank
    reshapes and slices its columns; bias over tp; batch over dp. Bugs: a
    contiguous chunk of the flat vector taken as the shard, the flat vector
    reshaped (dout, din) and transposed.
10. a tied autoencoder (decoder = encoder transposed) training step, the
    hidden over tp4, batch over dp, check_vma=True, optax.sgd + momentum.
    Bugs: stop_gradient on the decoder's use of W (only the encoder's
    gradient), loss psum'd over dp.
11. a butterfly matrix (16 features, 4 stages of strides 1, 2, 4, 8) with
    the features over tp4 and batch over dp: strides 1, 2 local, strides 4,
    8 between devices d and d xor (stride / 4) by ppermute. Bugs: a cyclic
    partner for the cross-device stages, the stages in reverse order, the
    own / partner coefficients swapped on the cross-device stages.
19. a Kronecker layer written as reshape-matmul-matmul (two jnp.matmul),
    A's columns (the output's major index) over tp, B's rows over dp
    (FSDP, all_gather'd), batch over dp, no reduction. Bugs: x reshaped
    minor-major, B transposed after the gather.
20. a bf16 low-rank layer (f32 accumulation): U's rank columns over tp,
    the rank all_gather'd (tiled), V's outputs over tp. Bugs: gathered
    untiled on a new minor axis and reshaped (rank interleaved), the rank
    not reduced (local rank block times V's matching rows).
21. weights tied across 4 layers by a tie pattern [0, 1, 0, 1] into 2
    stacked Megatron MLP weight sets (hidden over tp), lax.scan over the
    pattern, jax.grad of the stacked weights (check_vma=True), optax.sgd.
    Bugs: the pattern [0, 0, 1, 1], the row-parallel output not psum'd
    (carry pcast to varying, loss pmean'd over dp and tp).
22. a causal Toeplitz layer as an explicit matrix T[t, s] = h[t - s] built
    by each sp rank for its rows at global indices, times the all_gather'd
    input. Bugs: rows at local indices, anti-causal (h[s - t]).
23. a Monarch matrix with one block per device over the joint (dp, tp)
    axes, the permutation by an all_to_all over ("dp", "tp"), L's block at
    the linear index dp * 4 + tp. Bugs: all_to_all over ("tp", "dp"),
    offset from the tp index only.
24. the baseline materialises jnp.kron(A, B); the body multiplies by the
    factors (A's rows with x's major index over tp, psum). Bugs: B's index
    taken as the output's major one, no psum.
GSPMD pairs (jax.jit with in/out shardings): 12. the Monarch training step
of 2. (sgd + momentum); 13. a Kronecker-factored layer training step with
optax.adam; 14. a tensor-train layer's loss and gradient with the cores
sharded on the rank; 15. a block-circulant layer's loss and gradient; 16. a
hypernetwork training step with optax.adamw and H's output columns over tp;
17. a grouped linear layer with the groups over tp; 18. a 4-layer residual
MLP with weights tied [A, B, A, B] and its gradient.
Numerics: every correct pair agrees with its baseline at rounding level
(at most 2e-6 absolute, 1.3e-5 on the scanned tied layers whose outputs reach
17); every bug variant differs by more than 0.09 (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh99.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh99.py"
C = Corpus("samples/fresh99", SCRIPT, "samples/gen/run_fresh99.sh", sys.argv[1:])
rng, R, I = seeded(9999)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
DT = {"dp": 2, "tp": 4}

# ---------------------------------------------------------------------------
# 1. Monarch matrix
M = 8


def monarch(x, Rb, Lb):
    X = x.reshape(x.shape[0], M, M)
    y = jnp.einsum("bij,ikj->bik", X, Rb)
    yt = jnp.swapaxes(y, 1, 2)
    z = jnp.einsum("bki,kli->bkl", yt, Lb)
    return z.reshape(x.shape[0], M * M)


def monarch_tp(bug):
    def f(x, Rb, Lb):
        n = 4
        nb = M // n
        me = idx("tp")
        X = x.reshape(x.shape[0], nb, M)
        y = jnp.einsum("bij,ikj->bik", X, Rb)  # (b, nb blocks i, 8 k)
        if bug == "no-permutation":
            Ll = lax.dynamic_slice_in_dim(Lb, me * nb, nb, 0)
            z = jnp.einsum("bik,ilk->bil", y, Ll)
            return z.reshape(x.shape[0], nb * M)
        ya = lax.all_to_all(y, "tp", 2, 1, tiled=True)  # (b, 8 i, nb k)
        if bug == "reshape-not-transpose":
            yt = ya.reshape(ya.shape[0], nb, M)
        else:
            yt = jnp.transpose(ya, (0, 2, 1))
        off = ((me + 1) % n) * nb if bug == "L-offset-one-shard" else me * nb
        Ll = lax.dynamic_slice_in_dim(Lb, off, nb, 0)
        z = jnp.einsum("bki,kli->bkl", yt, Ll)
        return z.reshape(x.shape[0], nb * M)
    return f


C.smap("s.monarch_alltoall_transpose.tp4", {"tp": 4}, monarch_tp, (P(None, "tp"), P("tp"), P()), P(None, "tp"),
       monarch, (R(4, 64), R(M, M, M, scale=0.35), R(M, M, M, scale=0.35)),
       bugs=[("reshape-not-transpose", ["wrong-permutation"]), ("L-offset-one-shard", ["wrong-offset"]),
             ("no-permutation", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. Monarch layer training step under dp x tp with sgd + momentum
OPT2 = optax.sgd(0.05, momentum=0.9)


def monarch_loss(p, x, t):
    return jnp.mean(jnp.square(jax.nn.gelu(monarch(x, p["R"], p["L"])) - t))


def monarch_step(p, s, x, t):
    l, g = jax.value_and_grad(monarch_loss)(p, x, t)
    u, s = OPT2.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def monarch_step_sm(bug):
    def f(p, s, x, t):
        nb = M // 4

        def loss(p):
            X = x.reshape(x.shape[0], nb, M)
            y = jnp.einsum("bij,ikj->bik", X, p["R"])
            ya = lax.all_to_all(y, "tp", 2, 1, tiled=True)
            yt = ya.reshape(ya.shape[0], nb, M) if bug == "reshape-not-transpose" else jnp.swapaxes(ya, 1, 2)
            z = jnp.einsum("bki,kli->bkl", yt, p["L"]).reshape(x.shape[0], nb * M)
            se = jnp.sum(jnp.square(jax.nn.gelu(z) - t))
            cnt = t.size if bug == "loss-over-local-count" else t.size * 4
            return pmean(psum(se, "tp") / cnt, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT2.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P2 = {"R": R(M, M, M, scale=0.35), "L": R(M, M, M, scale=0.35)}
S2 = OPT2.init(P2)
S2 = jax.tree.map(lambda a: a + 0.01 * R(*np.shape(a)) if np.ndim(a) == 3 else a, S2)
SPEC2 = {"R": P("tp"), "L": P("tp")}
SS2 = state_specs(S2, SPEC2)
X2, T2 = R(8, 64), R(8, 64)
C.smap("s.monarch_train_step_sgd_momentum.dp2xtp4", DT, monarch_step_sm, (SPEC2, SS2, P("dp", "tp"), P("dp", "tp")),
       (SPEC2, SS2, P()), monarch_step, (P2, S2, X2, T2), check_vma=True,
       bugs=[("reshape-not-transpose", ["wrong-permutation"]), ("loss-over-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. Kronecker-factored layer, y = x (A kron B)


def kron_layer(x, A, B):
    X = x.reshape(x.shape[0], A.shape[0], B.shape[0])
    return jnp.einsum("bik,ij,kl->bjl", X, A, B).reshape(x.shape[0], -1)


def kron_tp(bug):
    def f(x, A, B):
        X = x.reshape(x.shape[0], A.shape[0], B.shape[0])
        Bm = B.T if bug == "B-transposed" else B
        if bug == "factors-wrong-order":
            part = jnp.einsum("bik,ij,kl->blj", X, A, Bm)
        else:
            part = jnp.einsum("bik,ij,kl->bjl", X, A, Bm)
        dim = 2 if bug == "scatter-minor-index" else 1
        y = lax.psum_scatter(part, "tp", scatter_dimension=dim, tiled=True)
        return y.reshape(x.shape[0], -1)
    return f


C.smap("s.kronecker_layer_psum_scatter.dp2xtp4", DT, kron_tp, (P("dp", "tp"), P("tp"), P()), P("dp", "tp"),
       kron_layer, (R(4, 64), R(8, 8, scale=0.4), R(8, 8, scale=0.4)),
       bugs=[("factors-wrong-order", ["wrong-permutation"]), ("scatter-minor-index", ["wrong-axis"]),
             ("B-transposed", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 4. low-rank W = U V trained under FSDP (dp) x rank over tp, adamw
OPT4 = optax.adamw(1e-2, weight_decay=0.05)


def lr_loss(p, x, t):
    h = jnp.tanh(x @ p["U"] @ p["V"] + p["b"])
    return jnp.mean(jnp.square(h - t))


def lr_step(p, s, x, t):
    l, g = jax.value_and_grad(lr_loss)(p, x, t)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def lr_step_sm(bug):
    def f(p, s, x, t):
        def loss(p):
            U = lax.all_gather(p["U"], "dp", axis=0, tiled=True)   # (32, r/tp)
            V = lax.all_gather(p["V"], "dp", axis=1, tiled=True)   # (r/tp, 32)
            y = (x @ U) @ V
            if bug != "rank-not-reduced":
                y = psum(y, "tp")
            h = jnp.tanh(y + p["b"])
            l = jnp.mean(jnp.square(h - t))
            if bug == "rank-not-reduced":
                return pmean(l, ("dp", "tp"))
            if bug == "loss-psum-dp":
                return psum(l, "dp")
            return pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P4 = {"U": R(32, 16, scale=0.3), "V": R(16, 32, scale=0.3), "b": R(32, scale=0.1)}
S4 = OPT4.init(P4)
SPEC4 = {"U": P("dp", "tp"), "V": P("tp", "dp"), "b": P()}
SS4 = state_specs(S4, SPEC4)
C.smap("s.lowrank_fsdp_rank_tp_adamw.dp2xtp4", DT, lr_step_sm, (SPEC4, SS4, P("dp"), P("dp")), (SPEC4, SS4, P()),
       lr_step, (P4, S4, R(8, 32), R(8, 32, scale=0.5)), check_vma=True,
       bugs=[("rank-not-reduced", ["missing-collective"]), ("loss-psum-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 5. grouped (block-diagonal) linear layer, groups over tp
G, DG, OG = 8, 4, 6


def grouped(x, W, bias):
    X = x.reshape(x.shape[0], G, DG)
    return jax.nn.relu(jnp.einsum("bgi,gio->bgo", X, W) + bias).reshape(x.shape[0], G * OG)


def grouped_tp(bug):
    def f(x, W, bias):
        gl = G // 4
        me = idx("dp") if bug == "offset-from-dp" else idx("tp")
        off = ((me + 1) % 4) * gl if bug == "offset-one-shard" else me * gl
        Wl = lax.dynamic_slice_in_dim(W, off, gl, 0)
        bl = bias[:gl] if bug == "bias-offset-zero" else lax.dynamic_slice_in_dim(bias, off, gl, 0)
        X = x.reshape(x.shape[0], gl, DG)
        return jax.nn.relu(jnp.einsum("bgi,gio->bgo", X, Wl) + bl).reshape(x.shape[0], gl * OG)
    return f


C.smap("s.grouped_linear_replicated_weights_group_offset.dp2xtp4", DT, grouped_tp, (P("dp", "tp"), P(), P()),
       P("dp", "tp"), grouped, (R(4, G * DG), R(G, DG, OG, scale=0.5), R(G, OG, scale=0.5)),
       bugs=[("offset-one-shard", ["wrong-offset"]), ("offset-from-dp", ["wrong-axis"]),
             ("bias-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. tensor-train layer


def tt_layer(x, G1, G2, G3):
    X = x.reshape(x.shape[0], 4, 4, 4)
    t = jnp.einsum("bijk,ima->bjkma", X, G1)
    t = jnp.einsum("bjkma,ajnc->bkmnc", t, G2)
    return jnp.einsum("bkmnc,ckp->bmnp", t, G3).reshape(x.shape[0], 64)


def tt_tp(bug):
    def f(x, G1, G2, G3):
        X = x.reshape(x.shape[0], 4, 4, 4)
        if bug == "modes-reversed":
            X = jnp.transpose(X, (0, 3, 2, 1))
        t = jnp.einsum("bijk,ima->bjkma", X, G1)
        t = jnp.einsum("bjkma,ajnc->bkmnc", t, G2)
        if bug == "psum-over-dp":
            t = psum(t, "dp")
        elif bug != "rank-not-reduced":
            t = psum(t, "tp")
        return jnp.einsum("bkmnc,ckp->bmnp", t, G3).reshape(x.shape[0], 64)
    return f


C.smap("s.tensor_train_rank_over_tp.dp2xtp4", DT, tt_tp, (P("dp"), P(None, None, "tp"), P("tp"), P()), P("dp"),
       tt_layer, (R(4, 64), R(4, 4, 8, scale=0.5), R(8, 4, 4, 8, scale=0.3), R(8, 4, 4, scale=0.3)),
       bugs=[("rank-not-reduced", ["missing-collective"]), ("modes-reversed", ["wrong-permutation"]),
             ("psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. block-circulant layer by FFT


def block_circ(x, c):
    p, q, k = c.shape
    X = jnp.fft.rfft(x.reshape(x.shape[0], q, k), axis=-1)
    Cf = jnp.fft.rfft(c, axis=-1)
    return jnp.fft.irfft(jnp.einsum("bjf,ijf->bif", X, Cf), n=k, axis=-1).reshape(x.shape[0], p * k)


def block_circ_tp(bug):
    def f(x, c):
        p, ql, k = c.shape
        X = jnp.fft.rfft(x.reshape(x.shape[0], ql, k), axis=-1)
        Cf = jnp.fft.rfft(c, axis=-1)
        if bug == "correlation":
            Cf = jnp.conj(Cf)
        y = jnp.fft.irfft(jnp.einsum("bjf,ijf->bif", X, Cf), n=k, axis=-1)
        if bug != "no-psum":
            y = psum(y, "tp")
        return y.reshape(x.shape[0], p * k)
    return f


C.smap("s.block_circulant_fft_inblocks_tp.dp2xtp4", DT, block_circ_tp, (P("dp", "tp"), P(None, "tp")), P("dp"),
       block_circ, (R(4, 32), R(4, 4, 8, scale=0.4)),
       bugs=[("correlation", ["wrong-operand"]), ("no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. causal Toeplitz long convolution by FFT, sequence over sp
T8 = 32


def toeplitz_conv(x, h, nfft=2 * T8):
    Xf = jnp.fft.rfft(x, n=nfft, axis=1)
    Hf = jnp.fft.rfft(h, n=nfft, axis=0)
    return jnp.fft.irfft(Xf * Hf[None], n=nfft, axis=1)[:, :x.shape[1]]


def toeplitz_sp(bug):
    def f(x, h):
        tl = x.shape[1]
        xx = lax.all_gather(x, "sp", axis=1, tiled=True)
        y = toeplitz_conv(xx, h, nfft=T8 if bug == "fft-length-T" else 2 * T8)
        off = 0 if bug == "block-offset-zero" else idx("sp") * tl
        return lax.dynamic_slice_in_dim(y, off, tl, 1)
    return f


C.smap("s.toeplitz_longconv_fft_seq.sp4", {"sp": 4}, toeplitz_sp, (P(None, "sp"), P()), P(None, "sp"),
       toeplitz_conv, (R(2, T8, 4), R(T8, 4, scale=0.3)),
       bugs=[("fft-length-T", ["wrong-shape"]), ("block-offset-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. hypernetwork-generated weights, outputs over tp
DIN, DOUT, DZ = 16, 32, 8


def hyper(x, z, H, b):
    W = (z @ H).reshape(DIN, DOUT)
    return jax.nn.gelu(x @ W + b)


def hyper_tp(bug):
    def f(x, z, H, b):
        me = idx("tp")
        cl = DOUT // 4
        flat = z @ H
        if bug == "flat-chunk":
            Wl = lax.dynamic_slice_in_dim(flat, me * DIN * cl, DIN * cl, 0).reshape(DIN, cl)
        elif bug == "reshape-transposed":
            Wl = lax.dynamic_slice_in_dim(flat.reshape(DOUT, DIN).T, me * cl, cl, 1)
        else:
            Wl = lax.dynamic_slice_in_dim(flat.reshape(DIN, DOUT), me * cl, cl, 1)
        return jax.nn.gelu(x @ Wl + b)
    return f


C.smap("s.hypernet_generated_weight_col_slice.dp2xtp4", DT, hyper_tp, (P("dp"), P(), P(), P("tp")), P("dp", "tp"),
       hyper, (R(4, DIN), R(DZ), R(DZ, DIN * DOUT, scale=0.3), R(DOUT, scale=0.1)),
       bugs=[("flat-chunk", ["wrong-offset"]), ("reshape-transposed", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 10. tied autoencoder training step
OPT10 = optax.sgd(0.05, momentum=0.9)


def ae_loss(p, x):
    h = jax.nn.relu(x @ p["W"] + p["b"])
    return jnp.mean(jnp.square(h @ p["W"].T + p["c"] - x))


def ae_step(p, s, x):
    l, g = jax.value_and_grad(ae_loss)(p, x)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def ae_step_sm(bug):
    def f(p, s, x):
        def loss(p):
            h = jax.nn.relu(x @ p["W"] + p["b"])
            Wd = lax.stop_gradient(p["W"]) if bug == "decoder-stop-gradient" else p["W"]
            xr = psum(h @ Wd.T, "tp") + p["c"]
            l = jnp.mean(jnp.square(xr - x))
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P10 = {"W": R(32, 16, scale=0.3), "b": R(16, scale=0.1), "c": R(32, scale=0.1)}
S10 = OPT10.init(P10)
SPEC10 = {"W": P(None, "tp"), "b": P("tp"), "c": P()}
SS10 = state_specs(S10, SPEC10)
C.smap("s.tied_autoencoder_sgd_hidden_tp.dp2xtp4", DT, ae_step_sm, (SPEC10, SS10, P("dp")), (SPEC10, SS10, P()),
       ae_step, (P10, S10, R(8, 32)), check_vma=True,
       bugs=[("decoder-stop-gradient", ["missing-gradient"]), ("loss-psum-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 11. butterfly matrix
NB11 = 16
STRIDES = [1, 2, 4, 8]


def butterfly(x, ws, wo):
    for s, st in enumerate(STRIDES):
        x = ws[s] * x + wo[s] * x[:, np.arange(NB11) ^ st]
    return x


def butterfly_tp(bug):
    def f(x, ws, wo):
        nl, n = x.shape[1], 4
        order = list(enumerate(STRIDES))
        if bug == "stages-reversed":
            order = order[::-1]
        for s, st in order:
            if st < nl:
                other = x[:, np.arange(nl) ^ st]
                a, b = ws[s], wo[s]
            else:
                k = st // nl
                pairs = [(d, (d + 1) % n) for d in range(n)] if bug == "cyclic-partner" else [(d, d ^ k) for d in range(n)]
                other = lax.ppermute(x, "tp", pairs)
                a, b = (wo[s], ws[s]) if bug == "coeffs-swapped" else (ws[s], wo[s])
            x = a * x + b * other
        return x
    return f


C.smap("s.butterfly_xor_ppermute.dp2xtp4", DT, butterfly_tp, (P("dp", "tp"), P(None, "tp"), P(None, "tp")),
       P("dp", "tp"), butterfly, (R(4, NB11), R(4, NB11, scale=0.7), R(4, NB11, scale=0.7)),
       bugs=[("cyclic-partner", ["wrong-permutation"]), ("stages-reversed", ["wrong-permutation"]),
             ("coeffs-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 19. Kronecker layer as reshape-matmul-matmul (two jnp.matmul, no einsum):
#     A's columns (the output's major index) over tp, B's rows over dp
#     (FSDP, all_gather'd), batch over dp; no reduction needed.


def kron_mm(x, A, B):
    b = x.shape[0]
    X = x.reshape(b, A.shape[0], B.shape[0])        # (b, i, k)
    Y = jnp.matmul(X, B)                            # (b, i, l)
    Z = jnp.matmul(jnp.swapaxes(Y, 1, 2), A)        # (b, l, j)
    return jnp.swapaxes(Z, 1, 2).reshape(b, -1)     # (b, j*l)


def kron_mm_sm(bug):
    def f(x, A, B):
        b = x.shape[0]
        Bf = lax.all_gather(B, "dp", axis=0, tiled=True)
        if bug == "B-transposed-after-gather":
            Bf = Bf.T
        X = x.reshape(b, A.shape[0], Bf.shape[0])
        if bug == "reshape-minor-major":
            X = jnp.swapaxes(x.reshape(b, Bf.shape[0], A.shape[0]), 1, 2)
        Y = jnp.matmul(X, Bf)
        Z = jnp.matmul(jnp.swapaxes(Y, 1, 2), A)
        return jnp.swapaxes(Z, 1, 2).reshape(b, -1)
    return f


C.smap("s.kronecker_reshape_matmul_fsdp_B.dp2xtp4", DT, kron_mm_sm, (P("dp"), P(None, "tp"), P("dp")), P("dp", "tp"),
       kron_mm, (R(4, 64), R(8, 8, scale=0.4), R(8, 8, scale=0.4)),
       bugs=[("reshape-minor-major", ["wrong-permutation"]), ("B-transposed-after-gather", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 20. low-rank layer in bf16 (f32 accumulation): the rank of U over tp,
#     the rank all_gather'd, V's outputs over tp.


def lowrank_bf16(x, U, V):
    h = jnp.dot(x.astype(jnp.bfloat16), U.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return jnp.dot(h.astype(jnp.bfloat16), V.astype(jnp.bfloat16), preferred_element_type=jnp.float32)


def lowrank_bf16_sm(bug):
    def f(x, U, V):
        me = idx("tp")
        h = jnp.dot(x.astype(jnp.bfloat16), U.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        if bug == "rank-not-reduced":
            Vr = lax.dynamic_slice_in_dim(V, me * h.shape[1], h.shape[1], 0)
            return jnp.dot(h.astype(jnp.bfloat16), Vr.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
        if bug == "gather-interleaved":
            hf = lax.all_gather(h, "tp", axis=2).reshape(h.shape[0], -1)
        else:
            hf = lax.all_gather(h, "tp", axis=1, tiled=True)
        return jnp.dot(hf.astype(jnp.bfloat16), V.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return f


C.smap("s.lowrank_bf16_rank_gather_outputs_tp.dp2xtp4", DT, lowrank_bf16_sm, (P("dp"), P(None, "tp"), P(None, "tp")),
       P("dp", "tp"), lowrank_bf16, (R(8, 32), R(32, 16, scale=0.3), R(16, 32, scale=0.3)),
       bugs=[("gather-interleaved", ["wrong-permutation"]), ("rank-not-reduced", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 21. weights tied across layers: 4 Megatron MLP layers scanned over a
#     tie pattern [0, 1, 0, 1] into 2 stacked weight sets (hidden over tp),
#     batch over dp; jax.grad of the stacked weights (check_vma=True), sgd.
TIE = np.array([0, 1, 0, 1], np.int32)
OPT21 = optax.sgd(0.1)


def tied_scan_fwd(W1, W2, x, pattern, red=lambda v: v):
    def layer(h, k):
        return h + red(jax.nn.gelu(h @ W1[k]) @ W2[k]), None
    return lax.scan(layer, x, pattern)[0]


def tied_scan_step(p, x, t):
    def loss(p):
        return jnp.mean(jnp.square(tied_scan_fwd(p["W1"], p["W2"], x, TIE) - t))
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT21.update(g, OPT21.init(p), p)
    return optax.apply_updates(p, u), l


def tied_scan_sm(bug):
    def f(p, x, t):
        pat = np.array([0, 0, 1, 1], np.int32) if bug == "tie-pattern-blocked" else TIE

        def loss(p):
            red = (lambda v: v) if bug == "row-parallel-not-psummed" else (lambda v: psum(v, "tp"))
            x0 = lax.pcast(x, ("tp",), to="varying") if bug == "row-parallel-not-psummed" else x
            y = tied_scan_fwd(p["W1"], p["W2"], x0, pat, red)
            l = jnp.mean(jnp.square(y - t))
            return pmean(l, ("dp", "tp")) if bug == "row-parallel-not-psummed" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, _ = OPT21.update(g, OPT21.init(p), p)
        return optax.apply_updates(p, u), l
    return f


P21 = {"W1": R(2, 16, 32, scale=0.25), "W2": R(2, 32, 16, scale=0.25)}
SPEC21 = {"W1": P(None, None, "tp"), "W2": P(None, "tp")}
C.smap("s.tied_layers_scan_pattern_megatron.dp2xtp4", DT, tied_scan_sm, (SPEC21, P("dp"), P("dp")), (SPEC21, P()),
       tied_scan_step, (P21, R(8, 16), R(8, 16, scale=0.5)), check_vma=True,
       bugs=[("tie-pattern-blocked", ["wrong-operand"]), ("row-parallel-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 22. a Toeplitz layer as an explicit matrix built from its first column
#     (causal), T[t, s] = h[t - s] for s <= t: the rows over sp, each rank
#     builds its rows at global indices and multiplies the all_gather'd x.
T22 = 16


def toeplitz_mat(h, rows, n, sign=1):
    d = sign * (rows[:, None] - jnp.arange(n)[None, :])
    return jnp.where(d >= 0, h[jnp.clip(d, 0, n - 1)], 0.0)


def toeplitz_dense(x, h):
    return jnp.einsum("ts,bsd->btd", toeplitz_mat(h, jnp.arange(T22), T22), x)


def toeplitz_dense_sp(bug):
    def f(x, h):
        tl = x.shape[1]
        rows = jnp.arange(tl) + (0 if bug == "local-rows" else idx("sp") * tl)
        Tm = toeplitz_mat(h, rows, T22, sign=-1 if bug == "anticausal" else 1)
        xx = lax.all_gather(x, "sp", axis=1, tiled=True)
        return jnp.einsum("ts,bsd->btd", Tm, xx)
    return f


C.smap("s.toeplitz_dense_rows_sp.sp4", {"sp": 4}, toeplitz_dense_sp, (P(None, "sp"), P()), P(None, "sp"),
       toeplitz_dense, (R(2, T22, 4), R(T22, scale=0.4)),
       bugs=[("local-rows", ["wrong-offset"]), ("anticausal", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 23. a Monarch matrix with one block per device over the joint (dp, tp)
#     axes (8 devices): the permutation by an all_to_all over ("dp", "tp"),
#     L's block picked at the linear device index dp * 4 + tp.


def monarch_joint(bug):
    def f(x, Rb, Lb):
        X = x.reshape(x.shape[0], 1, M)
        y = jnp.einsum("bij,ikj->bik", X, Rb)                  # (b, 1, 8)
        axes = ("tp", "dp") if bug == "axes-order-swapped" else ("dp", "tp")
        ya = lax.all_to_all(y, axes, 2, 1, tiled=True)        # (b, 8, 1)
        me = idx("tp") if bug == "offset-from-tp-only" else idx("dp") * 4 + idx("tp")
        Ll = lax.dynamic_slice_in_dim(Lb, me, 1, 0)
        z = jnp.einsum("bki,kli->bkl", jnp.swapaxes(ya, 1, 2), Ll)
        return z.reshape(x.shape[0], M)
    return f


C.smap("s.monarch_joint_axes_alltoall.dp2xtp4", DT, monarch_joint, (P(None, ("dp", "tp")), P(("dp", "tp")), P()),
       P(None, ("dp", "tp")), monarch, (R(4, 64), R(M, M, M, scale=0.35), R(M, M, M, scale=0.35)),
       bugs=[("axes-order-swapped", ["wrong-permutation"]), ("offset-from-tp-only", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 24. the baseline materialises W = jnp.kron(A, B) and multiplies; the
#     distributed body never forms W: A's rows and x's major index over
#     tp4, the factored product, psum over tp. Batch over dp.


def kron_dense(x, A, B):
    return x @ jnp.kron(A, B)


def kron_factored(bug):
    def f(x, A, B):
        b = x.shape[0]
        X = x.reshape(b, A.shape[0], B.shape[0])              # (b, i_local, k)
        if bug == "kron-B-A":
            T = jnp.einsum("bik,kj->bij", X, B)
            Y = jnp.einsum("bij,il->bjl", T, A)                 # B's index taken as the major one
        else:
            T = jnp.einsum("bik,kl->bil", X, B)
            Y = jnp.einsum("bil,ij->bjl", T, A)
        if bug != "no-psum":
            Y = psum(Y, "tp")
        return Y.reshape(b, -1)
    return f


C.smap("s.kronecker_dense_baseline_factored_body.dp2xtp4", DT, kron_factored, (P("dp", "tp"), P("tp"), P()), P("dp"),
       kron_dense, (R(4, 64), R(8, 8, scale=0.4), R(8, 8, scale=0.4)),
       bugs=[("kron-B-A", ["wrong-permutation"]), ("no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
# 12. the Monarch training step of 2.
C.gspmd("g.monarch_train_step_sgd.dp2xtp4", DT, (SPEC2, SS2, P("dp"), P("dp")), (SPEC2, SS2, P()),
        monarch_step, (P2, S2, X2, T2))

# 13. Kronecker-factored layer training step with adam
OPT13 = optax.adam(3e-3)


def kron_step(p, s, x, t):
    def loss(p):
        return jnp.mean(jnp.square(jax.nn.silu(kron_layer(x, p["A"], p["B"])) - t))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P13 = {"A": R(8, 8, scale=0.4), "B": R(8, 8, scale=0.4)}
S13 = OPT13.init(P13)
SPEC13 = {"A": P("tp"), "B": P()}
SS13 = state_specs(S13, SPEC13)
C.gspmd("g.kronecker_train_step_adam.dp2xtp4", DT, (SPEC13, SS13, P("dp", "tp"), P("dp")), (SPEC13, SS13, P()),
        kron_step, (P13, S13, R(8, 64), R(8, 64, scale=0.5)))


# 14. tensor-train layer loss and gradient, cores sharded on the ranks
def tt_loss_grad(cores, x, t):
    return jax.value_and_grad(lambda c: jnp.mean(jnp.square(tt_layer(x, *c) - t)))(cores)


C.gspmd("g.tensor_train_loss_grad_rank_tp.dp2xtp4", DT,
        ((P(None, None, "tp"), P("tp"), P("tp")), P("dp"), P("dp")),
        (P(), (P(None, None, "tp"), P("tp"), P("tp"))), tt_loss_grad,
        ((R(4, 4, 8, scale=0.5), R(8, 4, 4, 8, scale=0.3), R(8, 4, 4, scale=0.3)), R(8, 64), R(8, 64, scale=0.3)))


# 15. block-circulant layer loss and gradient
def circ_loss_grad(c, x, t):
    return jax.value_and_grad(lambda c: jnp.mean(jnp.square(jnp.tanh(block_circ(x, c)) - t)))(c)


C.gspmd("g.block_circulant_loss_grad.dp2xtp4", DT, (P(None, "tp"), P("dp"), P("dp")), (P(), P(None, "tp")),
        circ_loss_grad, (R(4, 4, 8, scale=0.4), R(8, 32), R(8, 32, scale=0.5)))

# 16. hypernetwork training step, H's output columns over tp
OPT16 = optax.adamw(1e-2, weight_decay=0.01)


def hyper_step(p, s, x, t):
    def loss(p):
        W = jnp.einsum("z,zio->io", p["z"], p["H"])
        return jnp.mean(jnp.square(jax.nn.gelu(x @ W + p["b"]) - t))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT16.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P16 = {"z": R(DZ), "H": R(DZ, DIN, DOUT, scale=0.3), "b": R(DOUT, scale=0.1)}
S16 = OPT16.init(P16)
SPEC16 = {"z": P(), "H": P(None, None, "tp"), "b": P("tp")}
SS16 = state_specs(S16, SPEC16)
C.gspmd("g.hypernet_train_step_adamw.dp2xtp4", DT, (SPEC16, SS16, P("dp"), P("dp", "tp")), (SPEC16, SS16, P()),
        hyper_step, (P16, S16, R(8, DIN), R(8, DOUT, scale=0.5)))

# 17. grouped linear layer, groups over tp
C.gspmd("g.grouped_linear_groups_tp.dp2xtp4", DT, (P("dp", "tp"), P("tp"), P("tp")), P("dp", "tp"),
        grouped, (R(4, G * DG), R(G, DG, OG, scale=0.5), R(G, OG, scale=0.5)))


# 18. 4-layer residual MLP with weights tied [A, B, A, B] and its gradient
def tied_mlp_loss(p, x, t):
    h = x
    for name in ["A", "B", "A", "B"]:
        w1, w2 = p[name]
        h = h + jax.nn.gelu(h @ w1) @ w2
    return jnp.mean(jnp.square(h - t))


P18 = {k: (R(16, 32, scale=0.2), R(32, 16, scale=0.2)) for k in "AB"}
C.gspmd("g.tied_layers_ABAB_grad.dp2xtp4", DT,
        ({k: (P(None, "tp"), P("tp")) for k in "AB"}, P("dp"), P("dp")),
        (P(), {k: (P(None, "tp"), P("tp")) for k in "AB"}),
        lambda p, x, t: jax.value_and_grad(tied_mlp_loss)(p, x, t), (P18, R(8, 16), R(8, 16, scale=0.5)))

C.finish()
