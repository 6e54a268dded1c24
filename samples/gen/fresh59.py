"""samples/fresh59: a 59th batch of programs as a user writes them, on the theme of quantum circuit and tensor-network simulation under sharding in current JAX, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Conventions: n = 6 qubits, qubit 0 the most significant bit of the flat
index; a state vector (64,) sharded over a 1-D mesh of 2^g devices by its g
highest qubits, so device d holds qubits 0..g-1 as the bits of d (qubit k's
bit is (d >> (g-1-k)) & 1) and the local block reshaped (2,)*(n-g) holds
qubits g..n-1.
shard_map families:
 1. a layer of one-qubit complex64 gates (one 2x2 unitary per qubit) on a
    state over q4: local qubits by tensordot on the local axes, the two
    global qubits by a pair exchange (ppermute with the partner d ^ mask,
    own and partner amplitudes mixed by the gate's row of the device's bit).
    Bugs: partner from the other global qubit's mask, the gate's transpose
    (row/column swapped: U[1-b, b] for the partner), the local gates applied
    to reversed local axes.
 2. normalised <Z_k> of every qubit and the marginal distribution of the
    three global qubits of an unnormalised complex64 state over q8: |psi|^2
    as real(conj(psi) psi), the norm psum'd, the global qubits' signs from
    axis_index bits, the marginal by all_gather of the local weights.
    Bugs: norm not psum'd, conjugate dropped (real(psi psi)), global bit
    read from the wrong end of the device index.
 3. a two-qubit complex64 gate on (global qubit 0, local qubit 5) and a
    one-qubit gate on global qubit 1, over q4: the two global qubits swapped
    with local qubits 2, 3 by an all_to_all (tiled, split and concat on the
    local (4, 4) block's first axis), both gates applied locally, swapped
    back by the same all_to_all. Bugs: the gate put on local axis 1 (qubit 1
    where qubit 0 is meant), the swap done with qubits 4, 5 (split on the
    second axis) while the gate still assumes qubits 2, 3 moved, a missing
    swap back.
 4. a QAOA layer on a complex64 state over q8: the diagonal cost phase
    exp(-i gamma sum_e w_e z_i z_j) over a ring of edges with the global z's
    from axis_index and the local ones from iota bits, then the mixer
    exp(-i beta X) on every qubit (global ones by pair exchange with
    lax.cond-free jnp.where). Bugs: the phase's conjugate (exp(+i ...)),
    global z from the wrong end of the device index, the last ring edge
    (5, 0) written (5, 1).
 5. QAOA energy and its gradient in a real-pair representation (re, im in
    f32, no complex anywhere), p = 2 layers over q4, jax.value_and_grad
    inside the body with check_vma=True, the initial state sharded in.
    Bugs: the mixer's sign flipped in the imaginary update (a dropped
    conjugate), qubit 1's mixer partner d ^ 3 (both bits flipped), the cost energy's
    ring edge to the wrong qubit.
 6. VQE energy of the transverse-field Ising chain with a real RY + CNOT
    ladder ansatz (2 layers), real f32 amplitudes, over q4, jax.value_and_grad
    inside the body (check_vma=True): CNOT(0,1) between global qubits as a
    ppermute of devices 2 <-> 3, CNOT(1,2) as a flip of local axis 0 where
    the device's bit is set, the X terms of global qubits from the partner's
    amplitudes. Bugs: CNOT(0,1) swapping devices 0 <-> 1 (control read as
    0), X term of qubit 1 with qubit 0's partner, RY's sine sign flipped.
 7. overlap <phi|psi> of two complex64 MPS (5 sites, bond 8, open ends
    given as boundary vectors) with psi's left bond split over tp4: the
    environment's rows sharded, each step a partial contraction psum'd and
    the rows of the device sliced back at axis_index * block; final psum.
    Bugs: phi's tensors not conjugated, rows sliced at offset 0, the final
    psum missing.
 8. norm and <Z> at every site of a real (f32) MPS, bond split over tp2 on
    the right bond index of every tensor, contraction by lax.scan: the
    environment's columns sharded, the next tensor's rows all_gather'd (a
    user avoiding psum), Z inserted on the physical index at the site; the
    last site contracted with the device's slice of the right boundary
    vector and psum'd. Bugs: all_gather concatenating the wrong axis (the
    (block, 2 chi) gather reshaped to (chi, chi)), the last site's partial
    sum not psum'd, Z's sign on the wrong physical index.
 9. the gate layer of 1. in real pairs (re, im and the gates' real and
    imaginary parts in f32) over q8, the device's bits as (d // 2^j) % 2
    and the partner's mask from them. Bugs: local gate k on the next local
    axis, qubit 2's partner from qubit 1's mask, the gate's conjugate
    (imaginary parts negated) on the global qubits.
10. a real state over q4: a real orthogonal 4x4 gate on (global qubit 0,
    local qubit 5) and 2x2 ones on qubits 1 and 4, the global qubits
    swapped with local qubits 2, 3 by an all_to_all of (4, 2, 2) blocks.
    (The 2x2 gate is a rotation, not QR's symmetric reflection, so that its
    transpose differs.) Bugs: the transpose of the 2x2 gate on qubit 1, the swap back done on
    the (4, 4) view's second axis.
11. normalised <Z_k> and <X_k> of a real-pair state over q4, global bits by
    // and %, <X> of the global qubits from the partner's amplitudes
    (re re' + im im'). Bugs: norm not psum'd, qubit 0's sign from the bit of
    qubit 1 (a phase on the wrong shard), conjugate dropped (re re' - im im').
12. one mesh axis per global qubit (qa x qb = 2 x 2), real rotations on a
    real state: a global qubit's partner block as psum over its axis minus
    the own block (a psum'd pair exchange), the bit from axis_index of that
    axis. Bugs: qubit 0's psum over qb, the own block not subtracted,
    qubit 1's bit from qa.
13. real MPS fidelity |<phi|psi>|^2 / (<psi|psi> <phi|phi>) with psi's left
    bond over tp4: environments' rows kept sharded by psum_scatter, psi's
    conjugate side all_gather'd, phi's norm computed redundantly on every
    device and pmean'd. Bugs: the redundant norm psum'd (counted 4 times),
    psi's tensors gathered along the right bond and cut back (wrong dim).
14. a simple user over q8: the whole state all_gather'd, a rotation on
    qubit 0, CZ(0, 2) and a rotation on qubit 1 applied to the full state,
    the own block sliced back at axis_index * block. Bugs: CZ on (0, 1),
    the block of device 7 - d.
15. measurement statistics over q4 (real amplitudes): probabilities
    all_gather'd to every device, the outcome entropy computed redundantly
    and then psum'd / 4 (correct: the same value everywhere), <Z> of the
    local qubits psum'd over the gathered norm. Bugs: the redundant entropy
    psum'd without / 4, the norm of the own block only.
16. a 2-D mesh qa x qb, one global qubit per axis, real f32 state:
    SWAP(0, 1) of the global qubits as a ppermute over ("qa", "qb")
    (devices 1 <-> 2), a diagonal cos(theta z0 z1) from both axis indices,
    <Z0 Z1> and <Z0> over a psum over both axes, <Z0> first psum'd over qb
    (then the same on the qb pair) and the psum over both axes halved.
    Bugs: devices 2 <-> 3 swapped (CNOT, not SWAP), the norm psum'd over qa
    only.
GSPMD pairs (jax.jit with in/out shardings): 16. a one-qubit gate layer by
einsum on the (2,)*6 reshape of a state sharded P("q") over q4; 17. the
real-pair QAOA energy and gradient of 5. with the initial state sharded over
q8; 18. the MPS overlap of 7. with psi's tensors sharded on the left bond
over tp4; 19. normalised <Z_k> and <Z_k Z_k+1> of a complex64 state over q8;
20. the VQE energy and gradient of 6. with the state's initial vector
sharded over q4 and a with_sharding_constraint on the state after each
layer; 21. the real rotation layer of 12. with the state over
("qa", "qb"); 22. the qubit-order reversal (a transpose of the (2,)*6
view) of a complex64 state over q4, and of a real f32 state over q8
(22b); 22c. a SWAP of qubits 0 and 5 (swapaxes) and a rotation on the new
qubit 0 of a real state over q4; 23. a QFT as a normalised inverse FFT
of a complex64 state over q8 with its outcome probabilities.
The bug variants of the complex64 families 1.-4. and 7. that the static
rules do not decide are confirmed by executing both programs (the witness
runs complex64 parameters); the real-pair families 9.-11. carry the same
bugs in f32.
The partitioner writes the all-to-all of 22. / 22b. with mesh-style replica
groups over reordered sub-axes of q (mesh['q'=4] {'q':(2)2,'q':(1)2}); both
pairs agree with their baselines exactly (max_abs_diff 0).
Numerics: every correct pair agrees with its baseline at rounding level
(f32 / complex64); every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh59.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh59.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh59.py"
C = Corpus("samples/fresh59", SCRIPT, "samples/gen/run_fresh59.sh", sys.argv[1:])
rng, R, I = seeded(5959)
psum, idx = lax.psum, lax.axis_index
NQ = 6
DIM = 2 ** NQ


def cplx(*s, scale=1.0):
    return (R(*s, scale=scale) + 1j * R(*s, scale=scale)).astype(np.complex64)


def rand_unitaries(k, d=2):
    out = []
    for _ in range(k):
        q, r = np.linalg.qr(cplx(d, d).astype(np.complex128))
        out.append(q * (np.diag(r) / np.abs(np.diag(r)))[None, :])
    return np.stack(out).astype(np.complex64)


def apply1(t, u, ax):
    """One-qubit gate u (2, 2) on axis ax of a (2,)*m tensor."""
    return jnp.moveaxis(jnp.tensordot(u, t, axes=[[1], [ax]]), 0, ax)


def apply2(t, g4, a, b):
    """Two-qubit gate g4 (4, 4) on axes (a, b), a the high bit."""
    g = g4.reshape(2, 2, 2, 2)
    return jnp.moveaxis(jnp.tensordot(g, t, axes=[[2, 3], [a, b]]), (0, 1), (a, b))


def gbit(k, g, axis="q"):
    """The bit of global qubit k (< g) on this device."""
    return (idx(axis) >> (g - 1 - k)) & 1


def exchange(x, k, g, axis="q"):
    """The partner device's block for global qubit k: d <-> d ^ mask."""
    mask = 1 << (g - 1 - k)
    return lax.ppermute(x, axis, [(d, d ^ mask) for d in range(2 ** g)])


def zs_full():
    """z_k = 1 - 2 b_k of every basis state, (NQ, 64) f32."""
    i = np.arange(DIM)
    return np.stack([1 - 2 * ((i >> (NQ - 1 - k)) & 1) for k in range(NQ)]).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. one-qubit gate layer over q4 (2 global qubits), global ones by pair exchange


def layer_ref(psi, us):
    t = psi.reshape((2,) * NQ)
    for k in range(NQ):
        t = apply1(t, us[k], k)
    return t.reshape(DIM)


def layer_sv(bug):
    g = 2

    def f(psi, us):
        t = psi.reshape((2,) * (NQ - g))
        for k in range(g, NQ):
            ax = (NQ - 1 - k) if bug == "local-axes-reversed" else k - g
            t = apply1(t, us[k], ax)
        x = t.reshape(-1)
        for k in range(g):
            other = exchange(x, (1 - k) if bug == "partner-other-mask" else k, g)
            b = gbit(k, g)
            u = us[k]
            if bug == "gate-transposed":
                x = u[b, b] * x + u[1 - b, b] * other
            else:
                x = u[b, b] * x + u[b, 1 - b] * other
        return x
    return f


C.smap("s.gate_layer_pair_exchange.q4", {"q": 4}, layer_sv, (P("q"), P()), P("q"), layer_ref,
       (cplx(DIM), rand_unitaries(NQ)),
       bugs=[("partner-other-mask", ["wrong-permutation"]), ("gate-transposed", ["wrong-operand"]),
             ("local-axes-reversed", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. normalised <Z_k> and the global qubits' marginal over q8 (3 global qubits)


def zexp_ref(psi):
    p = jnp.real(jnp.conj(psi) * psi)
    p = p / jnp.sum(p)
    z = jnp.asarray(zs_full()) @ p
    marg = p.reshape(8, 8).sum(1)
    return z, marg


def zexp_sv(bug):
    g, nl = 3, NQ - 3

    def f(psi):
        if bug == "conj-dropped":
            w = jnp.real(psi * psi)
        else:
            w = jnp.real(jnp.conj(psi) * psi)
        loc = jnp.sum(w)
        norm = loc if bug == "norm-not-psummed" else psum(loc, "q")
        d = idx("q")
        zg = []
        for k in range(g):
            b = (d >> k) & 1 if bug == "global-bit-wrong-end" else (d >> (g - 1 - k)) & 1
            zg.append((1 - 2 * b).astype(jnp.float32) * loc)
        t = w.reshape((2,) * nl)
        zl = [jnp.sum(t, axis=tuple(a for a in range(nl) if a != j)) @ jnp.array([1.0, -1.0]) for j in range(nl)]
        z = psum(jnp.stack(zg + zl), "q") / norm
        marg = lax.all_gather(loc, "q") / norm
        return z, marg
    return f


C.smap("s.z_expect_marginal_normalised.q8", {"q": 8}, zexp_sv, (P("q"),), (P(), P()), zexp_ref,
       (cplx(DIM),),
       bugs=[("norm-not-psummed", ["missing-collective"]), ("conj-dropped", ["wrong-operand"]),
             ("global-bit-wrong-end", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. global qubits swapped with local ones by all_to_all, gates applied locally


def swap_ref(psi, g2, u1):
    t = psi.reshape((2,) * NQ)
    t = apply2(t, g2, 0, 5)
    t = apply1(t, u1, 1)
    return t.reshape(DIM)


def swap_sv(bug):
    def f(psi, g2, u1):
        x = psi.reshape(4, 4)  # (qubits 2,3), (qubits 4,5)
        split = 1 if bug == "swapped-with-qubits-4-5" else 0
        x = lax.all_to_all(x, "q", split, split, tiled=True)
        t = x.reshape(2, 2, 2, 2)  # now (qubit 0, qubit 1, qubit 4, qubit 5) locally
        t = apply2(t, g2, 1 if bug == "gate-on-axis-1" else 0, 3)
        t = apply1(t, u1, 1)
        x = t.reshape(4, 4)
        if bug != "no-swap-back":
            x = lax.all_to_all(x, "q", split, split, tiled=True)
        return x.reshape(-1)
    return f


C.smap("s.swap_global_local_all_to_all.q4", {"q": 4}, swap_sv, (P("q"), P(), P()), P("q"), swap_ref,
       (cplx(DIM), rand_unitaries(1, 4)[0], rand_unitaries(1)[0]),
       bugs=[("gate-on-axis-1", ["wrong-axis"]), ("swapped-with-qubits-4-5", ["wrong-axis"]),
             ("no-swap-back", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. a QAOA layer (cost phase + X mixer) on a complex64 state over q8
RING = [(k, (k + 1) % NQ) for k in range(NQ)]


def cost_of(z, w, ring=RING):
    return sum(w[e] * z[i] * z[j] for e, (i, j) in enumerate(ring))


def qaoa_layer_ref(psi, gamma, beta, w):
    c = cost_of(jnp.asarray(zs_full()), w)
    psi = psi * jnp.exp(-1j * gamma * c).astype(jnp.complex64)
    t = psi.reshape((2,) * NQ)
    ca, sa = jnp.cos(beta), jnp.sin(beta)
    for k in range(NQ):
        t = ca * t - 1j * sa * jnp.flip(t, k)
    return t.reshape(DIM)


def local_z(g, nl, bug=None, axis="q"):
    """z of all NQ qubits over the local block: (NQ, 2^nl) f32."""
    d = idx(axis)
    i = jnp.arange(2 ** nl)
    zs = []
    for k in range(NQ):
        if k < g:
            b = (d >> k) & 1 if bug == "global-z-wrong-end" else (d >> (g - 1 - k)) & 1
            zs.append(jnp.broadcast_to(1 - 2 * b, i.shape))
        else:
            zs.append(1 - 2 * ((i >> (NQ - 1 - k)) & 1))
    return jnp.stack(zs).astype(jnp.float32)


def qaoa_layer_sv(bug):
    g, nl = 3, NQ - 3

    def f(psi, gamma, beta, w):
        z = local_z(g, nl, bug)
        ring = RING[:-1] + [(5, 1)] if bug == "ring-edge-5-1" else RING
        c = cost_of(z, w, ring)
        sgn = 1.0 if bug == "phase-conjugated" else -1.0
        x = psi * lax.complex(jnp.cos(gamma * c), sgn * jnp.sin(gamma * c))
        ca, sa = jnp.cos(beta), jnp.sin(beta)
        t = x.reshape((2,) * nl)
        for j in range(nl):
            t = ca * t - 1j * sa * jnp.flip(t, j)
        x = t.reshape(-1)
        for k in range(g):
            x = ca * x - 1j * sa * exchange(x, k, g)
        return x
    return f


W6 = (1.0 + R(NQ, scale=0.3)).astype(np.float32)
C.smap("s.qaoa_phase_mixer_layer.q8", {"q": 8}, qaoa_layer_sv, (P("q"), P(), P(), P()), P("q"), qaoa_layer_ref,
       (cplx(DIM), np.float32(0.7), np.float32(0.4), W6),
       bugs=[("phase-conjugated", ["wrong-sign"]), ("global-z-wrong-end", ["wrong-offset"]),
             ("ring-edge-5-1", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 5. QAOA energy + gradient, real pairs (re, im) f32, p = 2, over q4


def qaoa_energy_rp_ref(re, im, gammas, betas, w):
    c = cost_of(jnp.asarray(zs_full()), w)
    for l in range(gammas.shape[0]):
        cg, sg = jnp.cos(gammas[l] * c), jnp.sin(gammas[l] * c)
        re, im = re * cg + im * sg, im * cg - re * sg
        cb, sb = jnp.cos(betas[l]), jnp.sin(betas[l])
        tr, ti = re.reshape((2,) * NQ), im.reshape((2,) * NQ)
        for k in range(NQ):
            tr, ti = cb * tr + sb * jnp.flip(ti, k), cb * ti - sb * jnp.flip(tr, k)
        re, im = tr.reshape(DIM), ti.reshape(DIM)
    return jnp.sum((re * re + im * im) * c)


def qaoa_grad_ref(re, im, gammas, betas, w):
    return jax.value_and_grad(qaoa_energy_rp_ref, argnums=(2, 3))(re, im, gammas, betas, w)


def qaoa_grad_sv(bug):
    g, nl = 2, NQ - 2

    def energy(re, im, gammas, betas, w):
        z = local_z(g, nl)
        ring = RING[:-1] + [(5, 1)] if bug == "energy-edge-wrong-qubit" else RING
        c_phase = cost_of(z, w)
        c_energy = cost_of(z, w, ring)
        for l in range(gammas.shape[0]):
            cg, sg = jnp.cos(gammas[l] * c_phase), jnp.sin(gammas[l] * c_phase)
            re, im = re * cg + im * sg, im * cg - re * sg
            cb, sb = jnp.cos(betas[l]), jnp.sin(betas[l])
            tr, ti = re.reshape((2,) * nl), im.reshape((2,) * nl)
            for j in range(nl):
                tr, ti = cb * tr + sb * jnp.flip(ti, j), cb * ti - sb * jnp.flip(tr, j)
            re, im = tr.reshape(-1), ti.reshape(-1)
            for k in range(g):
                if bug == "mixer-partner-both-bits" and k == 1:
                    perm = [(d, d ^ 3) for d in range(4)]
                    pr, pi = lax.ppermute(re, "q", perm), lax.ppermute(im, "q", perm)
                else:
                    pr, pi = exchange(re, k, g), exchange(im, k, g)
                if bug == "mixer-imag-sign-flipped":
                    re, im = cb * re + sb * pi, cb * im + sb * pr
                else:
                    re, im = cb * re + sb * pi, cb * im - sb * pr
        return psum(jnp.sum((re * re + im * im) * c_energy), "q")

    def f(re, im, gammas, betas, w):
        return jax.value_and_grad(energy, argnums=(2, 3))(re, im, gammas, betas, w)
    return f


def plus_state_pert():
    v = np.ones(DIM, np.float32) + R(DIM, scale=0.2)
    u = R(DIM, scale=0.2)
    n = np.sqrt(np.sum(v * v + u * u))
    return (v / n).astype(np.float32), (u / n).astype(np.float32)


RE0, IM0 = plus_state_pert()
GAM, BET = np.array([0.45, 0.8], np.float32), np.array([0.6, 0.25], np.float32)
C.smap("s.qaoa_energy_grad_realpair.q4", {"q": 4}, qaoa_grad_sv, (P("q"), P("q"), P(), P(), P()),
       (P(), (P(), P())), qaoa_grad_ref, (RE0, IM0, GAM, BET, W6), check_vma=True,
       bugs=[("mixer-imag-sign-flipped", ["wrong-sign"]), ("mixer-partner-both-bits", ["wrong-permutation"]),
             ("energy-edge-wrong-qubit", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 6. VQE: TFIM energy with a real RY + CNOT ladder ansatz, grad, over q4
JZ, HX = 1.0, 0.7
CNOT = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]], np.float32)


def ry(th):
    c, s = jnp.cos(th / 2), jnp.sin(th / 2)
    return jnp.stack([jnp.stack([c, -s]), jnp.stack([s, c])])


def vqe_energy_ref(psi0, theta):
    t = psi0.reshape((2,) * NQ)
    for l in range(theta.shape[0]):
        for k in range(NQ):
            t = apply1(t, ry(theta[l, k]), k)
        for k in range(NQ - 1):
            t = apply2(t, jnp.asarray(CNOT), k, k + 1)
    z = jnp.asarray(zs_full()).reshape((NQ,) + (2,) * NQ)
    p = t * t
    e = -JZ * sum(jnp.sum(p * z[k] * z[k + 1]) for k in range(NQ - 1))
    e = e - HX * sum(jnp.sum(t * jnp.flip(t, k)) for k in range(NQ))
    return e / jnp.sum(p)


def vqe_ref(psi0, theta):
    return jax.value_and_grad(vqe_energy_ref, argnums=1)(psi0, theta)


def vqe_sv(bug):
    g, nl = 2, NQ - 2

    def energy(psi0, theta):
        t = psi0.reshape((2,) * nl)
        d = idx("q")
        for l in range(theta.shape[0]):
            for j in range(nl):
                t = apply1(t, ry(theta[l, g + j]), j)
            x = t.reshape(-1)
            for k in range(g):
                c, s = jnp.cos(theta[l, k] / 2), jnp.sin(theta[l, k] / 2)
                if bug == "ry-sine-sign":
                    s = -s
                b = gbit(k, g)
                # row b of RY: [c, -s] for b = 0, [s, c] for b = 1 (partner holds the other bit)
                x = c * x + jnp.where(b == 0, -s, s) * exchange(x, k, g)
            if bug == "cnot01-control-zero":
                x = lax.ppermute(x, "q", [(0, 1), (1, 0), (2, 2), (3, 3)])
            else:
                x = lax.ppermute(x, "q", [(0, 0), (1, 1), (2, 3), (3, 2)])
            t = x.reshape((2,) * nl)
            t = jnp.where((d & 1) == 1, jnp.flip(t, 0), t)  # CNOT(1, 2)
            for j in range(nl - 1):
                t = apply2(t, jnp.asarray(CNOT), j, j + 1)
        z = local_z(g, nl).reshape((NQ,) + (2,) * nl)
        p = t * t
        e = -JZ * sum(jnp.sum(p * z[k] * z[k + 1]) for k in range(NQ - 1))
        e = e - HX * sum(jnp.sum(t * jnp.flip(t, j)) for j in range(nl))
        x = t.reshape(-1)
        for k in range(g):
            e = e - HX * jnp.sum(x * exchange(x, 0 if bug == "x1-partner-of-qubit-0" else k, g))
        return psum(e, "q") / psum(jnp.sum(p), "q")

    def f(psi0, theta):
        return jax.value_and_grad(energy, argnums=1)(psi0, theta)
    return f


PSI0 = np.zeros(DIM, np.float32)
PSI0[0] = 1.0
TH6 = R(2, NQ, scale=0.8)
C.smap("s.vqe_tfim_ry_cnot_grad.q4", {"q": 4}, vqe_sv, (P("q"), P()), (P(), P()), vqe_ref, (PSI0, TH6),
       check_vma=True,
       bugs=[("cnot01-control-zero", ["wrong-permutation"]), ("x1-partner-of-qubit-0", ["wrong-permutation"]),
             ("ry-sine-sign", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 7. MPS overlap <phi|psi>, psi's left bond split over tp4
LS, CHI = 5, 8


def mps_overlap_ref(A, B, la, ra, lb, rb):
    E = jnp.outer(la, jnp.conj(lb))

    def step(E, ab):
        a, b = ab
        E = jnp.einsum("ac,asb,csd->bd", E, a, jnp.conj(b))
        return E, None
    E, _ = lax.scan(step, E, (A, B))
    return jnp.einsum("bd,b,d->", E, ra, jnp.conj(rb))


def mps_overlap_sv(bug):
    def f(A, B, la, ra, lb, rb):
        blk = A.shape[1]
        off = 0 if bug == "rows-at-offset-0" else idx("tp") * blk
        E = jnp.outer(la, jnp.conj(lb))  # rows: my block of psi's bond
        for i in range(LS):
            bc = B[i] if bug == "phi-not-conjugated" else jnp.conj(B[i])
            tmp = jnp.einsum("ac,csd->asd", E, bc)
            full = psum(jnp.einsum("asd,asb->bd", tmp, A[i]), "tp")
            E = lax.dynamic_slice_in_dim(full, off, blk, 0)
        part = jnp.einsum("bd,b,d->", E, lax.dynamic_slice_in_dim(ra, off, blk, 0), jnp.conj(rb))
        return part if bug == "final-psum-missing" else psum(part, "tp")
    return f


def rand_mps(scale):
    return cplx(LS, CHI, 2, CHI, scale=scale)


MPS_ARGS = (rand_mps(0.35), rand_mps(0.35), cplx(CHI), cplx(CHI), cplx(CHI), cplx(CHI))
C.smap("s.mps_overlap_left_bond_split.tp4", {"tp": 4}, mps_overlap_sv,
       (P(None, "tp"), P(), P("tp"), P(), P(), P()), P(), mps_overlap_ref, MPS_ARGS,
       bugs=[("phi-not-conjugated", ["wrong-operand"]), ("rows-at-offset-0", ["wrong-offset"]),
             ("final-psum-missing", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. real MPS: norm and <Z_i> at every site, right bond split over tp2, scan
LR = 6
ZOP = np.diag([1.0, -1.0]).astype(np.float32)


def mps_env_ref(M, l, r):
    """Environments with an operator op (2,2) at site s: sum over a tensor stack."""
    def contract(op_site):
        E = jnp.outer(l, l)

        def step(E, xs):
            m, i = xs
            op = jnp.where(i == op_site, jnp.asarray(ZOP), jnp.eye(2, dtype=jnp.float32))
            return jnp.einsum("ac,asb,st,ctd->bd", E, m, op, m), None
        E, _ = lax.scan(step, E, (M, jnp.arange(LR)))
        return jnp.einsum("bd,b,d->", E, r, r)
    norm = contract(-1)
    zs = jnp.stack([contract(s) for s in range(LR)])
    return norm, zs / norm


def mps_env_sv(bug):
    def f(M, l, r):
        # M: (LR, chi, 2, chi/2): this device's columns of every tensor's right bond
        blk = M.shape[3]
        me = idx("tp")

        def opat(i, op_site):
            if bug == "z-on-wrong-index":
                z = jnp.diag(jnp.array([-1.0, 1.0], jnp.float32))
            else:
                z = jnp.asarray(ZOP)
            return jnp.where(i == op_site, z, jnp.eye(2, dtype=jnp.float32))

        def contract(op_site):
            E = jnp.outer(l, l)  # full at the left end

            def step(E, xs):
                m, i = xs
                mf = lax.all_gather(m, "tp", axis=2, tiled=True)  # (chi, 2, chi) full
                En = jnp.einsum("ac,asb,st,ctd->bd", E, m, opat(i, op_site), mf)  # (my b, all d)
                if bug == "gather-wrong-axis":
                    return lax.all_gather(En, "tp", axis=1, tiled=True).reshape(E.shape), None
                return lax.all_gather(En, "tp", axis=0, tiled=True), None
            E, _ = lax.scan(step, E, (M[:-1], jnp.arange(LR - 1)))
            m = M[-1]
            mf = lax.all_gather(m, "tp", axis=2, tiled=True)
            En = jnp.einsum("ac,asb,st,ctd->bd", E, m, opat(LR - 1, op_site), mf)
            part = jnp.einsum("bd,b,d->", En, lax.dynamic_slice_in_dim(r, me * blk, blk), r)
            return part if bug == "last-site-no-psum" else psum(part, "tp")
        norm = contract(-1)
        zs = jnp.stack([contract(s) for s in range(LR)])
        return norm, zs / norm
    return f


C.smap("s.mps_real_norm_zexp_scan.tp2", {"tp": 2}, mps_env_sv, (P(None, None, None, "tp"), P(), P()), (P(), P()),
       mps_env_ref, (R(LR, CHI, 2, CHI, scale=0.4), R(CHI), R(CHI)),
       bugs=[("gather-wrong-axis", ["wrong-axis"]), ("last-site-no-psum", ["missing-collective"]),
             ("z-on-wrong-index", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 9. the gate layer of 1. in real pairs over q8, bits by // and %


def layer_rp_ref(re, im, ur, ui):
    psi = (re + 1j * im).astype(jnp.complex64)
    out = layer_ref(psi, (ur + 1j * ui).astype(jnp.complex64))
    return jnp.real(out), jnp.imag(out)


def layer_rp_sv(bug):
    g, nl = 3, NQ - 3

    def f(re, im, ur, ui):
        tr, ti = re.reshape((2,) * nl), im.reshape((2,) * nl)
        for k in range(g, NQ):
            ax = (k - g + 1) % nl if bug == "wrong-local-qubit" else k - g
            tr, ti = apply1(tr, ur[k], ax) - apply1(ti, ui[k], ax), apply1(ti, ur[k], ax) + apply1(tr, ui[k], ax)
        xr, xi = tr.reshape(-1), ti.reshape(-1)
        d = idx("q")
        for k in range(g):
            step = 2 ** (g - 1 - k)
            b = (d // step) % 2
            mask_k = k - 1 if (bug == "partner-of-previous-qubit" and k == 2) else k
            mask = 2 ** (g - 1 - mask_k)
            perm = [(s_, s_ ^ mask) for s_ in range(2 ** g)]
            pr, pi = lax.ppermute(xr, "q", perm), lax.ppermute(xi, "q", perm)
            ar, ai = jnp.where(b == 0, ur[k, 0, 0], ur[k, 1, 1]), jnp.where(b == 0, ui[k, 0, 0], ui[k, 1, 1])
            cr, ci = jnp.where(b == 0, ur[k, 0, 1], ur[k, 1, 0]), jnp.where(b == 0, ui[k, 0, 1], ui[k, 1, 0])
            if bug == "conj-dropped":
                ai, ci = -ai, -ci
            xr, xi = ar * xr - ai * xi + cr * pr - ci * pi, ar * xi + ai * xr + cr * pi + ci * pr
        return xr, xi
    return f


U9 = rand_unitaries(NQ)
C.smap("s.gate_layer_realpair_divmod_bits.q8", {"q": 8}, layer_rp_sv, (P("q"), P("q"), P(), P()), (P("q"), P("q")),
       layer_rp_ref, (R(DIM), R(DIM), np.real(U9).astype(np.float32), np.imag(U9).astype(np.float32)),
       bugs=[("wrong-local-qubit", ["wrong-axis"]), ("partner-of-previous-qubit", ["wrong-permutation"]),
             ("conj-dropped", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 10. real state over q4: a real orthogonal gate on (global 0, local 5) via an
#     all_to_all swap of the global qubits with local qubits 2, 3 ((4, 2, 2) blocks)


def orth(dm):
    q, _ = np.linalg.qr(R(dm, dm).astype(np.float64))
    return q.astype(np.float32)


def swap_real_ref(x, o4, o2):
    t = x.reshape((2,) * NQ)
    t = apply2(t, o4, 0, 5)
    t = apply1(t, o2, 1)
    t = apply1(t, o2.T, 4)
    return t.reshape(DIM)


def swap_real_sv(bug):
    def f(x, o4, o2):
        t = apply1(x.reshape(2, 2, 2, 2), o2.T, 2)  # qubit 4 is local: before the swap
        x = t.reshape(4, 2, 2)
        x = lax.all_to_all(x, "q", 0, 0, tiled=True)
        t = x.reshape(2, 2, 2, 2)  # (qubit 0, qubit 1, qubit 4, qubit 5)
        t = apply2(t, o4, 0, 3)
        t = apply1(t, o2 if bug != "gate-transposed" else o2.T, 1)
        x = t.reshape(4, 2, 2)
        if bug == "swap-back-on-wrong-axis":
            x = lax.all_to_all(x.reshape(4, 4), "q", 1, 1, tiled=True)
        else:
            x = lax.all_to_all(x, "q", 0, 0, tiled=True)
        return x.reshape(-1)
    return f


C.smap("s.swap_all_to_all_real_orthogonal.q4", {"q": 4}, swap_real_sv, (P("q"), P(), P()), P("q"), swap_real_ref,
       (R(DIM), orth(4), np.array([[np.cos(0.6), -np.sin(0.6)], [np.sin(0.6), np.cos(0.6)]], np.float32)),
       bugs=[("gate-transposed", ["wrong-operand"]), ("swap-back-on-wrong-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 11. normalised <Z_k> and <X_k> of a real-pair state over q4, global bits by
#     // and %, <X> of global qubits from the partner's amplitudes


def zx_rp_ref(re, im):
    p = re * re + im * im
    n = jnp.sum(p)
    z = jnp.asarray(zs_full()) @ p / n
    tr, ti = re.reshape((2,) * NQ), im.reshape((2,) * NQ)
    xs = jnp.stack([jnp.sum(tr * jnp.flip(tr, k) + ti * jnp.flip(ti, k)) for k in range(NQ)]) / n
    return z, xs


def zx_rp_sv(bug):
    g, nl = 2, NQ - 2

    def f(re, im):
        d = idx("q")
        p = re * re + im * im
        n_loc = jnp.sum(p)
        n = n_loc if bug == "norm-not-psummed" else psum(n_loc, "q")
        zl = []
        for k in range(g):
            b = d % 2 if (bug == "sign-on-wrong-shard" and k == 0) else (d // (2 ** (g - 1 - k))) % 2
            zl.append(jnp.where(b == 1, -n_loc, n_loc))
        i = jnp.arange(2 ** nl)
        for k in range(g, NQ):
            zl.append(jnp.sum(p * (1 - 2 * ((i >> (NQ - 1 - k)) & 1))))
        tr, ti = re.reshape((2,) * nl), im.reshape((2,) * nl)
        xl = []
        for k in range(g):
            pr, pi = exchange(re, k, g), exchange(im, k, g)
            xl.append(jnp.sum(re * pr - im * pi) if bug == "conj-dropped" else jnp.sum(re * pr + im * pi))
        for j in range(nl):
            xl.append(jnp.sum(tr * jnp.flip(tr, j) + ti * jnp.flip(ti, j)))
        return psum(jnp.stack(zl), "q") / n, psum(jnp.stack(xl), "q") / n
    return f


C.smap("s.zx_expect_realpair_divmod.q4", {"q": 4}, zx_rp_sv, (P("q"), P("q")), (P(), P()), zx_rp_ref,
       (R(DIM), R(DIM)),
       bugs=[("norm-not-psummed", ["missing-collective"]), ("sign-on-wrong-shard", ["wrong-offset"]),
             ("conj-dropped", ["wrong-sign"])])

# ---------------------------------------------------------------------------
# 12. one mesh axis per global qubit (qa x qb = 2 x 2): gates on the global
#     qubits by a psum'd pair exchange (psum over the qubit's axis minus the
#     own block is the partner's block), real orthogonal gates on a real state


def rot(a):
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]], np.float32)


def psum_pair_ref(x, o):
    t = x.reshape((2,) * NQ)
    for k in range(NQ):
        t = apply1(t, o[k], k)
    return t.reshape(DIM)


def psum_pair_sv(bug):
    def f(x, o):
        t = x.reshape((2,) * (NQ - 2))
        for k in range(2, NQ):
            t = apply1(t, o[k], k - 2)
        x = t.reshape(-1)
        for k, ax in enumerate(("qa", "qb")):
            sum_ax = "qb" if (bug == "psum-over-other-axis" and k == 0) else ax
            partner = psum(x, sum_ax) if bug == "own-block-not-subtracted" else psum(x, sum_ax) - x
            b = idx("qa" if (bug == "bit-from-other-axis" and k == 1) else ax)
            own = jnp.where(b == 0, o[k, 0, 0], o[k, 1, 1])
            oth = jnp.where(b == 0, o[k, 0, 1], o[k, 1, 0])
            x = own * x + oth * partner
        return x
    return f


O12 = np.stack([rot(a) for a in (0.3, 1.1, -0.7, 0.5, 2.0, -1.4)])
C.smap("s.psum_pair_exchange_axis_per_qubit.qa2xqb2", {"qa": 2, "qb": 2}, psum_pair_sv, (P(("qa", "qb")), P()),
       P(("qa", "qb")), psum_pair_ref, (R(DIM), O12),
       bugs=[("psum-over-other-axis", ["wrong-axis"]), ("own-block-not-subtracted", ["wrong-operand"]),
             ("bit-from-other-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 13. real MPS fidelity |<phi|psi>|^2 / (<psi|psi><phi|phi>), psi's left bond
#     over tp4, environments' rows by psum_scatter; phi's norm computed
#     redundantly on every device and pmean'd (a user making sure)


def mps_fid_ref(A, B, la, ra, lb, rb):
    def ov(X, Y, lx, rx, ly, ry):
        E = jnp.outer(lx, ly)
        for i in range(X.shape[0]):
            E = jnp.einsum("ac,asb,csd->bd", E, X[i], Y[i])
        return jnp.einsum("bd,b,d->", E, rx, ry)
    o = ov(A, B, la, ra, lb, rb)
    return o * o / (ov(A, A, la, ra, la, ra) * ov(B, B, lb, rb, lb, rb))


def mps_fid_sv(bug):
    def f(A, B, la, ra, lb, rb):
        blk = A.shape[1]
        me = idx("tp")
        ra_loc = lax.dynamic_slice_in_dim(ra, me * blk, blk)

        def sharded_ov(Y, ly, ry, Yfull):
            E = jnp.outer(la, ly)  # rows: my block of psi's left bond
            for i in range(A.shape[0]):
                tmp = jnp.einsum("ac,csd->asd", E, Yfull(i))
                part = jnp.einsum("asd,asb->bd", tmp, A[i])
                E = lax.psum_scatter(part, "tp", scatter_dimension=0, tiled=True)
            return psum(jnp.einsum("bd,b,d->", E, ra_loc, ry), "tp")
        o = sharded_ov(B, lb, rb, lambda i: B[i])
        la_full = lax.all_gather(la, "tp", tiled=True)
        if bug == "gathered-wrong-dim":
            nA = sharded_ov(A, la_full, ra, lambda i: lax.all_gather(A[i], "tp", axis=2, tiled=True).reshape(A.shape[1] * 4, 2, -1)[:, :, :A.shape[3]])
        else:
            nA = sharded_ov(A, la_full, ra, lambda i: lax.all_gather(A[i], "tp", axis=0, tiled=True))
        E = jnp.outer(lb, lb)
        for i in range(B.shape[0]):
            E = jnp.einsum("ac,asb,csd->bd", E, B[i], B[i])
        nB = jnp.einsum("bd,b,d->", E, rb, rb)
        nB = psum(nB, "tp") if bug == "redundant-norm-psummed" else lax.pmean(nB, "tp")
        return o * o / (nA * nB)
    return f


def rmps(scale=0.45):
    return R(LS, CHI, 2, CHI, scale=scale)


C.smap("s.mps_fidelity_real_psum_scatter.tp4", {"tp": 4}, mps_fid_sv,
       (P(None, "tp"), P(), P("tp"), P(), P(), P()), P(), mps_fid_ref,
       (rmps(), rmps(), R(CHI), R(CHI), R(CHI), R(CHI)),
       bugs=[("redundant-norm-psummed", ["wrong-reduction"]), ("gathered-wrong-dim", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 14. a simple user: a CZ and a Hadamard-like rotation on global qubits by
#     all_gather'ing the whole state, applying the gates, and slicing the own
#     block back at axis_index * block (q8, real f32)
CZ = np.diag([1.0, 1.0, 1.0, -1.0]).astype(np.float32)


def gather_slice_ref(x, o):
    t = x.reshape((2,) * NQ)
    t = apply1(t, o, 0)
    t = apply2(t, CZ, 0, 2)
    t = apply1(t, o.T, 1)
    return t.reshape(DIM)


def gather_slice_sv(bug):
    def f(x, o):
        blk = x.shape[0]
        full = lax.all_gather(x, "q", tiled=True)
        t = full.reshape((2,) * NQ)
        t = apply1(t, o, 0)
        t = apply2(t, CZ, 0, 1 if bug == "cz-on-qubit-1" else 2)
        t = apply1(t, o.T, 1)
        off = (7 - idx("q")) * blk if bug == "slice-reversed-device" else idx("q") * blk
        return lax.dynamic_slice_in_dim(t.reshape(DIM), off, blk)
    return f


C.smap("s.gather_apply_slice_global_gates.q8", {"q": 8}, gather_slice_sv, (P("q"), P()), P("q"),
       gather_slice_ref, (R(DIM), rot(0.9)),
       bugs=[("cz-on-qubit-1", ["wrong-operand"]), ("slice-reversed-device", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. measurement statistics over q4 (real f32 amplitudes): the probabilities
#     all_gather'd so every device holds them all; the Shannon entropy of the
#     outcome distribution computed redundantly and then psum'd / 4 (a user
#     averaging a value that is already the same everywhere); <Z_k> of the
#     local qubits from the own block, psum'd, over the gathered norm


def stats_ref(x):
    p = x * x
    p = p / jnp.sum(p)
    ent = -jnp.sum(p * jnp.log(p))
    z = jnp.asarray(zs_full())[2:] @ p
    return ent, z


def stats_sv(bug):
    def f(x):
        p_loc = x * x
        pf = lax.all_gather(p_loc, "q", tiled=True)
        norm = jnp.sum(p_loc) if bug == "norm-from-own-block" else jnp.sum(pf)
        q = pf / norm
        ent = -jnp.sum(q * jnp.log(q))
        ent = psum(ent, "q") if bug == "redundant-entropy-psummed" else psum(ent, "q") / 4
        i = jnp.arange(p_loc.shape[0])
        z = jnp.stack([jnp.sum(p_loc * (1 - 2 * ((i >> (NQ - 1 - k)) & 1))) for k in range(2, NQ)])
        return ent, psum(z, "q") / norm
    return f


C.smap("s.measurement_entropy_allgather_probs.q4", {"q": 4}, stats_sv, (P("q"),), (P(), P()), stats_ref,
       (R(DIM),),
       bugs=[("redundant-entropy-psummed", ["wrong-reduction"]), ("norm-from-own-block", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 16. 2-D mesh (qa x qb, one global qubit each), real f32 state: SWAP(0, 1)
#     of the two global qubits as a ppermute over both axes (devices 1 <-> 2
#     in the flattened index), a ZZ rotation between them from both
#     axis_index values, then <Z0 Z1> and <Z0> normalised by a psum over
#     both axes; <Z0> psum'd over qb (where it is the same) and halved


def swap_zz_ref(x, theta):
    t = x.reshape((2,) * NQ)
    t = jnp.swapaxes(t, 0, 1)
    z = jnp.asarray(zs_full()).reshape((NQ,) + (2,) * NQ)
    t = t * jnp.cos(theta * z[0] * z[1])  # a real "damping" diagonal
    p = t * t
    n = jnp.sum(p)
    return t.reshape(DIM), jnp.sum(p * z[0] * z[1]) / n, jnp.sum(p * z[0]) / n


def swap_zz_sv(bug):
    def f(x, theta):
        perm = [(0, 0), (1, 1), (2, 3), (3, 2)] if bug == "swap-wrong-devices" else [(0, 0), (1, 2), (2, 1), (3, 3)]
        x = lax.ppermute(x, ("qa", "qb"), perm)
        za = (1 - 2 * idx("qa")).astype(jnp.float32)
        zb = (1 - 2 * idx("qb")).astype(jnp.float32)
        x = x * jnp.cos(theta * za * zb)
        p_loc = jnp.sum(x * x)
        n = psum(p_loc, "qa") if bug == "norm-over-qa-only" else psum(p_loc, ("qa", "qb"))
        zz = psum(p_loc * za * zb, ("qa", "qb")) / n
        z0_qa = psum(p_loc * za, "qb")  # sums the qb pair: depends on qa only
        z0 = psum(z0_qa, ("qa", "qb")) / 2 / n
        return x, zz, z0
    return f


C.smap("s.swap_global_pair_ppermute_2d.qa2xqb2", {"qa": 2, "qb": 2}, swap_zz_sv, (P(("qa", "qb")), P()),
       (P(("qa", "qb")), P(), P()), swap_zz_ref, (R(DIM), np.float32(0.8)),
       bugs=[("swap-wrong-devices", ["wrong-permutation"]), ("norm-over-qa-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# GSPMD pairs


def layer_einsum(psi, us):
    t = psi.reshape((2,) * NQ)
    letters = "abcdef"
    for k in range(NQ):
        src = letters
        dst = letters[:k] + "z" + letters[k + 1:]
        t = jnp.einsum("z%s,%s->%s" % (letters[k], src, dst), us[k], t)
    return t.reshape(DIM)


C.gspmd("g.gate_layer_einsum_reshape.q4", {"q": 4}, (P("q"), P()), P("q"), layer_einsum,
        (cplx(DIM), rand_unitaries(NQ)))

C.gspmd("g.qaoa_energy_grad_realpair.q8", {"q": 8}, (P("q"), P("q"), P(), P(), P()), (P(), (P(), P())),
        qaoa_grad_ref, (RE0, IM0, GAM, BET, W6))

C.gspmd("g.mps_overlap_left_bond.tp4", {"tp": 4}, (P(None, "tp"), P(), P("tp"), P("tp"), P(), P()), P(),
        mps_overlap_ref, MPS_ARGS)


def zz_expect(psi):
    p = jnp.abs(psi) ** 2
    p = p / jnp.sum(p)
    z = jnp.asarray(zs_full())
    return z @ p, jnp.stack([(z[k] * z[k + 1]) @ p for k in range(NQ - 1)])


C.gspmd("g.z_zz_expectations.q8", {"q": 8}, (P("q"),), (P(), P()), zz_expect, (cplx(DIM),))

M13 = make_mesh({"q": 4})


def vqe_constrained(psi0, theta):
    def energy(psi0, theta):
        t = psi0.reshape((2,) * NQ)
        for l in range(theta.shape[0]):
            for k in range(NQ):
                t = apply1(t, ry(theta[l, k]), k)
            for k in range(NQ - 1):
                t = apply2(t, jnp.asarray(CNOT), k, k + 1)
            t = lax.with_sharding_constraint(t.reshape(DIM), NamedSharding(M13, P("q"))).reshape((2,) * NQ)
        z = jnp.asarray(zs_full()).reshape((NQ,) + (2,) * NQ)
        p = t * t
        e = -JZ * sum(jnp.sum(p * z[k] * z[k + 1]) for k in range(NQ - 1))
        e = e - HX * sum(jnp.sum(t * jnp.flip(t, k)) for k in range(NQ))
        return e / jnp.sum(p)
    return jax.value_and_grad(energy, argnums=1)(psi0, theta)


C.gspmd("g.vqe_tfim_grad_constrained.q4", {"q": 4}, (P("q"), P()), (P(), P()), vqe_constrained, (PSI0, TH6))

def reverse_qubits(psi):
    t = psi.reshape((2,) * NQ)
    return jnp.transpose(t, tuple(range(NQ))[::-1]).reshape(DIM)


C.gspmd("g.qubit_order_reversal_transpose.q4", {"q": 4}, (P("q"),), P("q"), reverse_qubits, (cplx(DIM),))


C.gspmd("g.qubit_order_reversal_real.q8", {"q": 8}, (P("q"),), P("q"), reverse_qubits, (R(DIM),))


def swap_q0_q5(x, o):
    t = jnp.swapaxes(x.reshape((2,) * NQ), 0, 5)
    return apply1(t, o, 0).reshape(DIM)


C.gspmd("g.swap_qubits_0_5_then_gate_real.q4", {"q": 4}, (P("q"), P()), P("q"), swap_q0_q5, (R(DIM), rot(0.4)))


def qft_probs(psi):
    psi = psi / jnp.sqrt(jnp.sum(jnp.abs(psi) ** 2))
    out = jnp.fft.ifft(psi) * np.sqrt(DIM).astype(np.float32)
    return out, jnp.abs(out) ** 2


C.gspmd("g.qft_by_fft_probs.q8", {"q": 8}, (P("q"),), (P("q"), P("q")), qft_probs, (cplx(DIM),))

C.gspmd("g.psum_pair_gates_2d_mesh.qa2xqb2", {"qa": 2, "qb": 2}, (P(("qa", "qb")), P()), P(("qa", "qb")),
        psum_pair_ref, (R(DIM), O12))

C.finish()
