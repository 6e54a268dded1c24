"""samples/fresh76: a 76th batch of programs as a user writes them, on the theme of neural operators and learned simulators for physics and weather under sharding in current JAX (2-D Fourier neural operators with pencil decompositions, spectral Poisson solves, DFT-by-matmul spectral convolutions with a psum'd partial transform, GraphCast-style encode-process-decode graph networks with sharded edges, U-Net halos, finite-difference physics losses across device boundaries, lax.scan rollout training with optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. a 2-D FNO spectral layer with the x axis of the grid over sp4 (pencil
    decomposition): rfft along the local y axis, the lowest 8 ky modes
    kept, all_to_all (ky modes split, x concatenated), complex fft along
    x, the kx modes at both ends (:4 and -4:) multiplied by complex
    weights passed replicated as real / imaginary parts and sliced at the
    device's ky offset by dynamic_slice, written into a zero spectrum,
    ifft along x, all_to_all back, zero-padded to 9 ky modes, irfft.
    Bugs: weights sliced at ky offset 0, the negative kx block taken from
    rows 4:8, the inverse x transform with norm="forward" (scale x16).
 2. a spectral Poisson solve (laplacian(phi) = f, Nyquist ky mode dropped)
    with x over sp8: rfft along y, the 8 kept ky modes stacked as
    real / imaginary in a trailing dim of 2 so the all_to_all moves real
    data, fft along x, division by -(kx^2 + ky^2) with the device's ky the
    axis index, the mean mode zeroed on device 0 only, ifft, all_to_all
    back. Bugs: ky taken as 0 on every device (local index), real and
    imaginary parts swapped after the first all_to_all.
 3. a truncated spectral convolution written as a DFT by matmul (cos / sin
    matrices, no jnp.fft) on a 1-D grid over sp4: the forward transform a
    partial sum over the device's grid points psum'd over sp, complex mode
    mixing by real arithmetic, the inverse evaluated at the device's own
    grid points with weight 2 on the non-DC modes; the baseline is
    jnp.fft.rfft / irfft. Bugs: grid positions without the axis_index
    offset, the partial transform not psum'd, weight 1 on the non-DC modes.
 4. GraphCast-style encode-process-decode with every edge set sharded over
    ep4 and the node features replicated: grid->mesh encoder, two
    mesh->mesh processor rounds, mesh->grid decoder; edge MLPs on
    [h_src, h_dst, e], segment_sum at the destinations of the local edges,
    psum over ep, node MLP with residuals. Bugs: the second processor
    round's aggregation not psum'd, the decoder aggregating at the edge
    sources, psum applied after the node MLP of the encoder (a nonlinear
    update of a partial sum).
 5. a message-passing training step with the nodes over dp4 and the edges
    over dp4 (arbitrary edges): node features all_gather'd, messages of
    the local edges segment_sum'd to all nodes, psum_scatter back to the
    node blocks, a node MLP, MSE to a target normalised by the global node
    count; jax.grad inside the body (check_vma=True, replicated weights
    get their psum from the transpose) and optax.adam. Bugs: the
    aggregation sliced at the own block without the psum_scatter, the
    loss divided by the local node count.
 6. a mesh->grid decoder with the grid nodes and their incoming edges
    partitioned together over ep4 (edges grouped by destination device),
    the batch over dp2, the mesh features replicated: destination indices
    made local by subtracting axis_index * block, bf16 messages
    accumulated in f32 by segment_sum. Bugs: global destination indices
    (out-of-range ones dropped), an extra psum over ep.
 6b. the same decoder written defensively: edges whose destination is
    not on this device are masked out (clipped index, zero message), so
    nothing indexes out of range. Bugs: ownership mask without the device
    offset, an extra psum over ep.
 7. a one-level U-Net (3x3 conv, 2x2 average pool, coarse 3x3 conv,
    nearest upsample, skip concatenation, 3x3 conv) on NHWC images with H
    over sp4 and the batch over dp2: one-row halos from both neighbours by
    non-cyclic ppermute (zeros at the image edge) at the fine and at the
    coarse level, convolutions VALID in H after the halo concat. Bugs:
    cyclic halos (periodic image), the coarse conv with zero halos, halos
    swapped (the top halo from the lower neighbour).
 8. a finite-difference physics loss (5-point Poisson residual on the
    interior plus a data term) and its gradient wrt the field by
    jax.value_and_grad inside the body (check_vma=True), the grid over a
    2 x 4 mesh (x over a, y over b), halos in both directions, the
    interior mask from global indices, the loss psum'd over (a, b). Bugs:
    interior mask from local indices, the y halo exchanged along a, grid
    spacing from the local extent.
 9. rollout training of a learned 1-D simulator (u + dt * (nu * periodic
    laplacian + pointwise MLP)) over 4 steps by lax.scan, the grid over
    sp4 with cyclic one-point halos each step, the loss over all steps
    psum'd and normalised by the global count, jax.grad inside the body
    (check_vma=True) and an optax.adam step. Bugs: the halo exchanged once
    before the scan (stale halos), non-cyclic (zero) halos, the loss
    normalised by the local count.
GSPMD pairs (jax.jit with in/out shardings): 10. the 2-D FNO layer of 1.
(rfft2 / irfft2) with x over sp4 and the weights' ky dim over sp4;
11. the encode-process-decode network of 4. with the edge arrays over ep4;
12. the U-Net of 7. with the batch over dp2 and H over sp4; 13. the
rollout training step of 9. with optax.adam, the grid over sp4; 14. the
physics loss and gradient of 8. on a 2 x 4 mesh; 15. the spectral Poisson
solve of 2. with x over sp8; 16. the message-passing training step of 5.
with nodes and edges over dp4; 17. the truncated 1-D spectral convolution
of 3. (rfft / irfft) with the grid over sp4.
(1.'s inverse-norm-forward was a known miss until the witness executed
complex reduce products: now found by execution.)
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh76.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh76.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh76.py"
C = Corpus("samples/fresh76", SCRIPT, "samples/gen/run_fresh76.sh", sys.argv[1:])
rng, R, I = seeded(7676)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def shift_perm(n, d, cyclic):
    """ppermute pairs sending device i's data to device i + d."""
    return [(i, (i + d) % n) for i in range(n) if cyclic or 0 <= i + d < n]


# ---------------------------------------------------------------------------
# 1. 2-D FNO spectral layer, pencil decomposition, x over sp4.
B1, X1, Y1, C1 = 2, 16, 16, 4
M1, M2 = 4, 8  # kx modes at each end, ky modes kept


def fno2d(x, wr, wi):
    F = jnp.fft.rfft2(x, axes=(1, 2))
    blk = jnp.concatenate([F[:, :M1, :M2], F[:, -M1:, :M2]], 1)
    out = jnp.einsum("bxyc,xycd->bxyd", blk, wr + 1j * wi)
    Z = jnp.zeros((x.shape[0], X1, Y1 // 2 + 1, wr.shape[-1]), out.dtype)
    Z = Z.at[:, :M1, :M2].set(out[:, :M1]).at[:, -M1:, :M2].set(out[:, M1:])
    return jnp.fft.irfft2(Z, s=(X1, Y1), axes=(1, 2))


def fno2d_pencil(bug):
    def f(x, wr, wi):
        n = 4
        ml = M2 // n
        F = jnp.fft.rfft(x, axis=2)[:, :, :M2]
        F = lax.all_to_all(F, "sp", 2, 1, tiled=True)  # (b, X, ml, c)
        F = jnp.fft.fft(F, axis=1)
        if bug == "neg-kx-from-rows-4-8":
            blk = jnp.concatenate([F[:, :M1], F[:, M1:2 * M1]], 1)
        else:
            blk = jnp.concatenate([F[:, :M1], F[:, -M1:]], 1)
        off = 0 if bug == "weights-at-ky-offset-0" else idx("sp") * ml
        w = lax.dynamic_slice_in_dim(wr, off, ml, 1) + 1j * lax.dynamic_slice_in_dim(wi, off, ml, 1)
        out = jnp.einsum("bxyc,xycd->bxyd", blk, w)
        G = jnp.zeros((x.shape[0], X1, ml, wr.shape[-1]), out.dtype)
        G = G.at[:, :M1].set(out[:, :M1]).at[:, -M1:].set(out[:, M1:])
        G = jnp.fft.ifft(G, axis=1, norm="forward" if bug == "inverse-norm-forward" else "backward")
        G = lax.all_to_all(G, "sp", 1, 2, tiled=True)  # (b, X/n, M2, d)
        G = jnp.pad(G, ((0, 0), (0, 0), (0, Y1 // 2 + 1 - M2), (0, 0)))
        return jnp.fft.irfft(G, n=Y1, axis=2)
    return f


A1 = (R(B1, X1, Y1, C1), R(2 * M1, M2, C1, C1, scale=0.3), R(2 * M1, M2, C1, C1, scale=0.3))
C.smap("s.fno2d_pencil_a2a_modes_sliced.sp4", {"sp": 4}, fno2d_pencil, (P(None, "sp"), P(), P()), P(None, "sp"),
       fno2d, A1,
       bugs=[("weights-at-ky-offset-0", ["wrong-offset"]), ("neg-kx-from-rows-4-8", ["wrong-offset"]),
             ("inverse-norm-forward", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. spectral Poisson solve, x over sp8, real / imaginary stacked for the
#    all_to_all.
B2, X2, Y2 = 2, 16, 16
L2 = 2 * np.pi


def poisson(f):
    F = jnp.fft.rfft2(f, axes=(1, 2))
    F = F.at[:, :, Y2 // 2].set(0)
    kx = jnp.fft.fftfreq(X2, 1.0 / X2)[:, None]
    ky = jnp.arange(Y2 // 2 + 1)[None, :]
    k2 = (kx ** 2 + ky ** 2).astype(jnp.float32)
    U = jnp.where(k2 > 0, -F / jnp.where(k2 > 0, k2, 1.0), 0)
    return jnp.fft.irfft2(U, s=(X2, Y2), axes=(1, 2))


def poisson_pencil(bug):
    def f(fl):
        n, me = 8, idx("sp")
        F = jnp.fft.rfft(fl, axis=2)[:, :, :Y2 // 2]  # (b, X/8, 8)
        S = jnp.stack([F.real, F.imag], -1)
        S = lax.all_to_all(S, "sp", 2, 1, tiled=True)  # (b, X, 1, 2)
        if bug == "re-im-swapped":
            F = S[..., 1] + 1j * S[..., 0]
        else:
            F = S[..., 0] + 1j * S[..., 1]
        F = jnp.fft.fft(F, axis=1)
        kx = jnp.fft.fftfreq(X2, 1.0 / X2)[:, None]
        ky = 0 if bug == "ky-local-index" else me
        k2 = (kx ** 2 + ky ** 2).astype(jnp.float32)
        U = jnp.where(k2 > 0, -F / jnp.where(k2 > 0, k2, 1.0), 0)
        U = jnp.fft.ifft(U, axis=1)
        S = jnp.stack([U.real, U.imag], -1)
        S = lax.all_to_all(S, "sp", 1, 2, tiled=True)  # (b, X/8, 8, 2)
        U = S[..., 0] + 1j * S[..., 1]
        U = jnp.pad(U, ((0, 0), (0, 0), (0, 1)))
        return jnp.fft.irfft(U, n=Y2, axis=2)
    return f


C.smap("s.poisson_spectral_pencil_reim_stacked.sp8", {"sp": 8}, poisson_pencil, (P(None, "sp"),), P(None, "sp"),
       poisson, (R(B2, X2, Y2),),
       bugs=[("ky-local-index", ["wrong-offset"]), ("re-im-swapped", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 3. truncated spectral convolution as a DFT by matmul, 1-D grid over sp4.
B3, N3, C3, M3 = 2, 32, 4, 6


def specconv1d(x, wr, wi):
    F = jnp.fft.rfft(x, axis=1)[:, :M3]
    out = jnp.einsum("bkc,kcd->bkd", F, wr + 1j * wi)
    out = jnp.pad(out, ((0, 0), (0, N3 // 2 + 1 - M3), (0, 0)))
    return jnp.fft.irfft(out, n=N3, axis=1)


def specconv_dft(bug):
    def f(x, wr, wi):
        nl = x.shape[1]
        pos = jnp.arange(nl) if bug == "local-positions" else idx("sp") * nl + jnp.arange(nl)
        ang = 2 * np.pi * pos[:, None].astype(jnp.float32) * jnp.arange(M3)[None, :] / N3  # (nl, M)
        c, s = jnp.cos(ang), jnp.sin(ang)
        re = jnp.einsum("bnc,nk->bkc", x, c)
        im = -jnp.einsum("bnc,nk->bkc", x, s)
        if bug != "no-psum":
            re, im = psum(re, "sp"), psum(im, "sp")
        ore = jnp.einsum("bkc,kcd->bkd", re, wr) - jnp.einsum("bkc,kcd->bkd", im, wi)
        oim = jnp.einsum("bkc,kcd->bkd", re, wi) + jnp.einsum("bkc,kcd->bkd", im, wr)
        wgt = jnp.where(jnp.arange(M3) == 0, 1.0, 1.0 if bug == "non-dc-weight-1" else 2.0)
        y = jnp.einsum("bkd,nk->bnd", ore * wgt[:, None], c) - jnp.einsum("bkd,nk->bnd", oim * wgt[:, None], s)
        return y / N3
    return f


# the DC and (N/2) imaginary parts are ignored by irfft; the weights keep
# imaginary DC output nonzero, which irfft drops and the DFT (sin(0) = 0) too.
C.smap("s.specconv_dft_matmul_partial_psum.sp4", {"sp": 4}, specconv_dft, (P(None, "sp"), P(), P()),
       P(None, "sp"), specconv1d, (R(B3, N3, C3), R(M3, C3, C3, scale=0.4), R(M3, C3, C3, scale=0.4)),
       bugs=[("local-positions", ["wrong-offset"]), ("no-psum", ["missing-all-reduce"]),
             ("non-dc-weight-1", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. GraphCast-style encode-process-decode, edges over ep4.
NG, NM, D4, E4 = 32, 8, 8, 32


def mlp(p, h):
    return jnp.tanh(h @ p[0]) @ p[1]


def gn_params(din, dh, dout):
    return (R(din, dh, scale=1 / np.sqrt(din)), R(dh, dout, scale=1 / np.sqrt(dh)))


def graphcast(hg, hm, e1, e2, e3, s1, d1, s2, d2, s3, d3, pe1, pn1, pe2, pn2, pe3, pn3):
    m = jax.ops.segment_sum(mlp(pe1, jnp.concatenate([hg[s1], hm[d1], e1], -1)), d1, NM)
    hm = hm + mlp(pn1, jnp.concatenate([hm, m], -1))
    for _ in range(2):
        m = jax.ops.segment_sum(mlp(pe2, jnp.concatenate([hm[s2], hm[d2], e2], -1)), d2, NM)
        hm = hm + mlp(pn2, jnp.concatenate([hm, m], -1))
    m = jax.ops.segment_sum(mlp(pe3, jnp.concatenate([hm[s3], hg[d3], e3], -1)), d3, NG)
    return hg + mlp(pn3, jnp.concatenate([hg, m], -1))


def graphcast_ep(bug):
    def f(hg, hm, e1, e2, e3, s1, d1, s2, d2, s3, d3, pe1, pn1, pe2, pn2, pe3, pn3):
        m = jax.ops.segment_sum(mlp(pe1, jnp.concatenate([hg[s1], hm[d1], e1], -1)), d1, NM)
        if bug == "psum-after-node-mlp":
            hm = hm + psum(mlp(pn1, jnp.concatenate([hm, m], -1)), "ep")
        else:
            hm = hm + mlp(pn1, jnp.concatenate([hm, psum(m, "ep")], -1))
        for r in range(2):
            m = jax.ops.segment_sum(mlp(pe2, jnp.concatenate([hm[s2], hm[d2], e2], -1)), d2, NM)
            if not (bug == "round2-no-psum" and r == 1):
                m = psum(m, "ep")
            hm = hm + mlp(pn2, jnp.concatenate([hm, m], -1))
        at = s3 if bug == "decoder-at-sources" else d3
        m = psum(jax.ops.segment_sum(mlp(pe3, jnp.concatenate([hm[s3], hg[d3], e3], -1)), at, NG), "ep")
        return hg + mlp(pn3, jnp.concatenate([hg, m], -1))
    return f


A4 = (R(NG, D4), R(NM, D4), R(E4, 4), R(E4, 4), R(E4, 4),
      I(0, NG, E4), I(0, NM, E4), I(0, NM, E4), I(0, NM, E4), I(0, NM, E4), I(0, NG, E4),
      gn_params(2 * D4 + 4, 16, D4), gn_params(2 * D4, 16, D4), gn_params(2 * D4 + 4, 16, D4),
      gn_params(2 * D4, 16, D4), gn_params(2 * D4 + 4, 16, D4), gn_params(2 * D4, 16, D4))
EDGE = P("ep")
C.smap("s.graphcast_encode_process_decode_edges.ep4", {"ep": 4}, graphcast_ep,
       (P(), P(), EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE) + (P(),) * 6, P(),
       graphcast, A4,
       bugs=[("round2-no-psum", ["missing-all-reduce"]), ("decoder-at-sources", ["wrong-operand"]),
             ("psum-after-node-mlp", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 5. message-passing training step, nodes and edges over dp4.
N5, E5, D5 = 32, 48, 6
OPT5 = optax.adam(1e-2)


def mp_loss(p, h, src, dst, tgt):
    msg = jax.nn.silu(jnp.concatenate([h[src], h[dst]], -1) @ p["we"])
    agg = jax.ops.segment_sum(msg, dst, N5)
    out = h + jnp.concatenate([h, agg], -1) @ p["wn"]
    return jnp.sum(jnp.square(out - tgt)) / N5


def mp_step(p, s, h, src, dst, tgt):
    l, g = jax.value_and_grad(mp_loss)(p, h, src, dst, tgt)
    u, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def mp_step_dp(bug):
    def f(p, s, h, src, dst, tgt):
        nl = h.shape[0]

        def loss(p):
            hh = lax.all_gather(h, "dp", tiled=True)
            msg = jax.nn.silu(jnp.concatenate([hh[src], hh[dst]], -1) @ p["we"])
            full = jax.ops.segment_sum(msg, dst, N5)
            if bug == "own-block-no-scatter":
                agg = lax.dynamic_slice_in_dim(full, idx("dp") * nl, nl, 0)
            else:
                agg = lax.psum_scatter(full, "dp", scatter_dimension=0, tiled=True)
            out = h + jnp.concatenate([h, agg], -1) @ p["wn"]
            cnt = nl if bug == "loss-local-count" else N5
            return psum(jnp.sum(jnp.square(out - tgt)), "dp") / cnt
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P5 = {"we": R(2 * D5, D5, scale=0.4), "wn": R(2 * D5, D5, scale=0.4)}
S5 = OPT5.init(P5)
SS5 = state_specs(S5, {"we": P(), "wn": P()})
C.smap("s.mp_train_allgather_psum_scatter_adam.dp4", {"dp": 4}, mp_step_dp,
       (P(), SS5, P("dp"), P("dp"), P("dp"), P("dp")), (P(), SS5, P()), mp_step,
       (P5, S5, R(N5, D5), I(0, N5, E5), I(0, N5, E5), R(N5, D5)), check_vma=True,
       bugs=[("own-block-no-scatter", ["missing-collective"]), ("loss-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. mesh->grid decoder, grid nodes and their incoming edges over ep4 together,
#    batch over dp2, bf16 messages accumulated in f32.
NG6, NM6, D6 = 32, 8, 8
S6 = I(0, NM6, 2 * NG6)
D6X = np.repeat(np.arange(NG6, dtype=np.int32), 2)  # 2 incoming edges per grid node, grouped by owner


def m2g(hg, hm, e, src, dst, w1, w2):
    x = jnp.concatenate([hm[:, src], hg[:, dst], e[None].repeat(hg.shape[0], 0)], -1).astype(jnp.bfloat16)
    msg = jax.nn.gelu(x @ w1.astype(jnp.bfloat16))
    agg = jax.vmap(lambda m: jax.ops.segment_sum(m.astype(jnp.float32), dst, NG6))(msg)
    return hg + agg @ w2


def m2g_owned(bug):
    def f(hg, hm, e, src, dst, w1, w2):
        nl = hg.shape[1]
        ldst = dst if bug == "global-dst-index" else dst - idx("ep") * nl
        x = jnp.concatenate([hm[:, src], hg[:, ldst], e[None].repeat(hg.shape[0], 0)], -1).astype(jnp.bfloat16)
        msg = jax.nn.gelu(x @ w1.astype(jnp.bfloat16))
        agg = jax.vmap(lambda m: jax.ops.segment_sum(m.astype(jnp.float32), ldst, nl))(msg)
        if bug == "extra-psum-ep":
            agg = psum(agg, "ep")
        return hg + agg @ w2
    return f


C.smap("s.m2g_decoder_dst_owned_edges_bf16.dp2xep4", {"dp": 2, "ep": 4}, m2g_owned,
       (P("dp", "ep"), P("dp"), P("ep"), P("ep"), P("ep"), P(), P()), P("dp", "ep"), m2g,
       (R(4, NG6, D6), R(4, NM6, D6), R(2 * NG6, 4), S6, D6X, R(2 * D6 + 4, 16, scale=0.3), R(16, D6, scale=0.3)),
       bugs=[("global-dst-index", ["wrong-offset"]), ("extra-psum-ep", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 6b. the decoder of 6. written defensively: edges whose destination is not
#     on this device are masked out (clipped index, zero message), so the
#     program never indexes out of range.


def m2g_masked(bug):
    def f(hg, hm, e, src, dst, w1, w2):
        nl = hg.shape[1]
        off = idx("ep") * nl
        ldst = dst - off
        own = (ldst >= 0) & (ldst < nl)
        if bug == "mask-without-offset":
            own = (dst >= 0) & (dst < nl)
        ci = jnp.clip(ldst, 0, nl - 1)
        x = jnp.concatenate([hm[:, src], hg[:, ci], e[None].repeat(hg.shape[0], 0)], -1).astype(jnp.bfloat16)
        msg = jax.nn.gelu(x @ w1.astype(jnp.bfloat16)).astype(jnp.float32)
        msg = jnp.where(own[None, :, None], msg, 0.0)
        agg = jax.vmap(lambda m: jax.ops.segment_sum(m, ci, nl))(msg)
        if bug == "residual-from-mesh-sum":
            return hg + psum(agg, "ep") @ w2
        return hg + agg @ w2
    return f


C.smap("s.m2g_decoder_masked_owner_edges.dp2xep4", {"dp": 2, "ep": 4}, m2g_masked,
       (P("dp", "ep"), P("dp"), P("ep"), P("ep"), P("ep"), P(), P()), P("dp", "ep"), m2g,
       (R(4, NG6, D6), R(4, NM6, D6), R(2 * NG6, 4), S6, D6X, R(2 * D6 + 4, 16, scale=0.3), R(16, D6, scale=0.3)),
       bugs=[("mask-without-offset", ["wrong-offset"]), ("residual-from-mesh-sum", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 7. one-level U-Net, H over sp4, batch over dp2.
DN = ("NHWC", "HWIO", "NHWC")


def conv_same(x, w):
    return lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=DN)


def pool2(x):
    b, h, w, c = x.shape
    return x.reshape(b, h // 2, 2, w // 2, 2, c).mean((2, 4))


def up2(x):
    return jnp.repeat(jnp.repeat(x, 2, 1), 2, 2)


def unet(x, w1, w2, w3):
    a = jax.nn.relu(conv_same(x, w1))
    b = jax.nn.relu(conv_same(pool2(a), w2))
    return conv_same(jnp.concatenate([a, up2(b)], -1), w3)


def unet_sp(bug):
    n = 4

    def halo_conv(x, w, zero=False):
        cyc = bug == "cyclic-halos"
        top_src, bot_src = (x[:, :1], x[:, -1:]) if bug == "halos-swapped" else (x[:, -1:], x[:, :1])
        top = lax.ppermute(top_src, "sp", shift_perm(n, 1, cyc))  # last row of the device above
        bot = lax.ppermute(bot_src, "sp", shift_perm(n, -1, cyc))  # first row of the device below
        if zero:
            top, bot = jnp.zeros_like(top), jnp.zeros_like(bot)
        xe = jnp.concatenate([top, x, bot], 1)
        return lax.conv_general_dilated(xe, w, (1, 1), ((0, 0), (1, 1)), dimension_numbers=DN)

    def f(x, w1, w2, w3):
        a = jax.nn.relu(halo_conv(x, w1))
        b = jax.nn.relu(halo_conv(pool2(a), w2, zero=bug == "coarse-zero-halo"))
        return halo_conv(jnp.concatenate([a, up2(b)], -1), w3)
    return f


C.smap("s.unet_one_level_row_halos.dp2xsp4", {"dp": 2, "sp": 4}, unet_sp, (P("dp", "sp"), P(), P(), P()),
       P("dp", "sp"), unet,
       (R(4, 16, 8, 3), R(3, 3, 3, 6, scale=0.3), R(3, 3, 6, 6, scale=0.3), R(3, 3, 12, 2, scale=0.3)),
       bugs=[("cyclic-halos", ["wrong-permutation"]), ("coarse-zero-halo", ["missing-collective"]),
             ("halos-swapped", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 8. finite-difference physics loss and its gradient, grid over a 2 x 4 mesh.
N8 = 16
H8 = 1.0 / (N8 - 1)


def pde_loss(u, f, obs):
    lap = (u[2:, 1:-1] + u[:-2, 1:-1] + u[1:-1, 2:] + u[1:-1, :-2] - 4 * u[1:-1, 1:-1]) / H8 ** 2
    res = lap - f[1:-1, 1:-1]
    return jnp.sum(res ** 2) / (N8 - 2) ** 2 * 1e-4 + jnp.mean((u - obs) ** 2)


def pde_val_grad(u, f, obs):
    return jax.value_and_grad(pde_loss)(u, f, obs)


def pde_sharded(bug):
    def f(u, fs, obs):
        na, nb = 2, 4
        lx, ly = u.shape
        ya = "a" if bug == "y-halo-along-a" else "b"
        h = 1.0 / (lx - 1) if bug == "spacing-from-local-extent" else H8

        def loss(u):
            up = lax.ppermute(u[-1:], "a", shift_perm(na, 1, False))
            dn = lax.ppermute(u[:1], "a", shift_perm(na, -1, False))
            nyb = na if ya == "a" else nb
            lf = lax.ppermute(u[:, -1:], ya, shift_perm(nyb, 1, False))
            rt = lax.ppermute(u[:, :1], ya, shift_perm(nyb, -1, False))
            ux = jnp.concatenate([up, u, dn], 0)
            uy = jnp.concatenate([lf, u, rt], 1)
            lap = (ux[2:] + ux[:-2] + uy[:, 2:] + uy[:, :-2] - 4 * u) / h ** 2
            if bug == "mask-local-index":
                gi, gj = jnp.arange(lx), jnp.arange(ly)
                ok = ((gi > 0) & (gi < lx - 1))[:, None] & ((gj > 0) & (gj < ly - 1))[None, :]
            else:
                gi, gj = idx("a") * lx + jnp.arange(lx), idx("b") * ly + jnp.arange(ly)
                ok = ((gi > 0) & (gi < N8 - 1))[:, None] & ((gj > 0) & (gj < N8 - 1))[None, :]
            res = jnp.where(ok, lap - fs, 0.0)
            tot = jnp.sum(res ** 2) / (N8 - 2) ** 2 * 1e-4 + jnp.sum((u - obs) ** 2) / N8 ** 2
            return psum(tot, ("a", "b"))
        return jax.value_and_grad(loss)(u)
    return f


XS8 = np.linspace(0, 1, N8, dtype=np.float32)
U8 = (np.sin(np.pi * XS8)[:, None] * np.sin(2 * np.pi * XS8)[None, :] + R(N8, N8, scale=0.05)).astype(np.float32)
C.smap("s.fd_poisson_residual_loss_grad.a2xb4", {"a": 2, "b": 4}, pde_sharded, (P("a", "b"),) * 3,
       (P(), P("a", "b")), pde_val_grad, (U8, R(N8, N8, scale=10.0), R(N8, N8)), check_vma=True,
       bugs=[("mask-local-index", ["wrong-offset"]), ("y-halo-along-a", ["wrong-axis"]),
             ("spacing-from-local-extent", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. rollout training of a learned 1-D simulator by lax.scan, grid over sp4.
B9, N9, C9, T9, DT = 2, 32, 2, 4, 0.1
OPT9 = optax.adam(3e-3)


def sim_step(p, u, lap):
    return u + DT * (p["nu"] * lap + jnp.tanh(u @ p["w1"]) @ p["w2"])


def rollout_loss(p, u0, tgt):
    def body(u, t):
        lap = jnp.roll(u, 1, 1) + jnp.roll(u, -1, 1) - 2 * u
        u = sim_step(p, u, lap)
        return u, jnp.sum((u - t) ** 2)
    _, errs = lax.scan(body, u0, tgt)
    return jnp.sum(errs) / (T9 * B9 * N9 * C9)


def rollout_step(p, s, u0, tgt):
    l, g = jax.value_and_grad(rollout_loss)(p, u0, tgt)
    u, s = OPT9.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def rollout_sp(bug):
    n = 4

    def halos(u):
        cyc = bug != "zero-halos"
        left = lax.ppermute(u[:, -1:], "sp", shift_perm(n, 1, cyc))
        right = lax.ppermute(u[:, :1], "sp", shift_perm(n, -1, cyc))
        return left, right

    def f(p, s, u0, tgt):
        def loss(p):
            h0 = halos(u0)

            def body(u, t):
                left, right = h0 if bug == "halo-once-before-scan" else halos(u)
                ue = jnp.concatenate([left, u, right], 1)
                u = sim_step(p, u, ue[:, 2:] + ue[:, :-2] - 2 * u)
                return u, jnp.sum((u - t) ** 2)
            _, errs = lax.scan(body, u0, tgt)
            cnt = T9 * B9 * u0.shape[1] * C9 if bug == "loss-local-count" else T9 * B9 * N9 * C9
            return psum(jnp.sum(errs), "sp") / cnt
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P9 = {"nu": np.float32(0.5), "w1": R(C9, 8, scale=0.5), "w2": R(8, C9, scale=0.5)}
S9 = OPT9.init(P9)
SS9 = state_specs(S9, {"nu": P(), "w1": P(), "w2": P()})
A9 = (P9, S9, R(B9, N9, C9), R(T9, B9, N9, C9))
C.smap("s.rollout_scan_learned_sim_cyclic_halo_adam.sp4", {"sp": 4}, rollout_sp,
       (P(), SS9, P(None, "sp"), P(None, None, "sp")), (P(), SS9, P()), rollout_step, A9, check_vma=True,
       bugs=[("halo-once-before-scan", ["wrong-value"]), ("zero-halos", ["wrong-permutation"]),
             ("loss-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. the 2-D FNO layer with x over sp4 and the weights' ky dim over sp4.
C.gspmd("g.fno2d_rfft2_x_sharded.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(None, "sp")),
        P(None, "sp"), fno2d, A1)

# 11. encode-process-decode with the edge arrays over ep4.
C.gspmd("g.graphcast_edges_sharded.ep4", {"ep": 4},
        (P(), P(), EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE, EDGE) + (P(),) * 6, P(), graphcast, A4)

# 12. the U-Net, batch over dp2 and H over sp4.
C.gspmd("g.unet_one_level.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P(), P(), P()), P("dp", "sp"), unet,
        (R(4, 16, 8, 3), R(3, 3, 3, 6, scale=0.3), R(3, 3, 6, 6, scale=0.3), R(3, 3, 12, 2, scale=0.3)))

# 13. the rollout training step, grid over sp4.
C.gspmd("g.rollout_scan_train_step.sp4", {"sp": 4}, (P(), SS9, P(None, "sp"), P(None, None, "sp")),
        (P(), SS9, P()), rollout_step, A9)

# 14. the physics loss and its gradient on a 2 x 4 mesh.
C.gspmd("g.fd_poisson_loss_grad.a2xb4", {"a": 2, "b": 4}, (P("a", "b"),) * 3, (P(), P("a", "b")), pde_val_grad,
        (U8, R(N8, N8, scale=10.0), R(N8, N8)))

# 15. the spectral Poisson solve, x over sp8.
C.gspmd("g.poisson_spectral.sp8", {"sp": 8}, (P(None, "sp"),), P(None, "sp"), poisson, (R(B2, X2, Y2),))

# 16. the message-passing training step of 5. with the nodes and edges over dp4.
C.gspmd("g.mp_train_step_nodes_edges.dp4", {"dp": 4}, (P(), SS5, P("dp"), P("dp"), P("dp"), P("dp")),
        (P(), SS5, P()), mp_step, (P5, S5, R(N5, D5), I(0, N5, E5), I(0, N5, E5), R(N5, D5)))

# 17. the truncated 1-D spectral convolution of 3. (rfft / irfft), grid over sp4.
C.gspmd("g.specconv1d_rfft_grid_sharded.sp4", {"sp": 4}, (P(None, "sp"), P(), P()), P(None, "sp"), specconv1d,
        (R(B3, N3, C3), R(M3, C3, C3, scale=0.4), R(M3, C3, C3, scale=0.4)))

C.finish()
