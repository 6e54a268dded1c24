"""samples/fresh15: a fifteenth batch of programs as a user writes them, on
the theme of scientific computing and iterative numerical methods in JAX
with sharding -- stencils with halo exchange, iterative solvers with a
global convergence test, spectral methods, N-body and particle-in-cell,
Monte Carlo, sparse linear algebra, prefix operations and control flow on
globally reduced predicates -- none of them an idiom of samples/fresh ..
fresh14, probe, train or wild.
shard_map families: the 2-D heat equation with a 5-point stencil, rows
over sp4, zero Dirichlet boundaries from non-cyclic ppermutes, a
lax.fori_loop; a 9-point (Mehrstellen) stencil on a periodic grid over a
2 x 4 mesh whose corner ghosts come from exchanging the columns of the
row-extended block; heat on a 2 x 2 mesh with a fixed boundary temperature
written into the global-edge ghosts, a lax.scan recording the total heat
(psum over both axes); the 2-D wave equation by leapfrog with given top and
bottom boundary rows and the kinetic energy of each step psum'd; a 3-D
7-point stencil in bf16 (f32 compute) over z; first-order upwind advection
with a velocity of either sign and the CFL time step from a pmax (sp8);
Jacobi for the Poisson equation in a lax.while_loop on the psum'd update
norm (2 x 2 mesh); Newton's method for Kepler's equation in a
lax.while_loop on a pmax'd residual, returning the iteration count;
red-black Gauss-Seidel on odd-sized blocks (the colour from global
indices, halos refreshed between colours); matrix-free conjugate gradients
with row halos and psum'd dot products in a lax.while_loop; dense CG with
the rows over sp4 and the search direction all_gathered (fori_loop,
residual history); 6 Lanczos steps with all_gathered vectors; the periodic
Poisson equation by FFT with tiled all_to_all transposes between the 1-D
passes (column wavenumbers at the block offset); a pseudo-spectral d/dx
along the sharded axis (all_to_all, rfft, i k, irfft, back); all-pairs
gravity with softening, a cutoff radius and a global-index self mask,
positions and masses all_gathered, velocity Verlet and a psum'd total
energy; the same forces by a ring of ppermutes of position and mass blocks
with kick-drift-kick leapfrog; 1-D electrostatic particle-in-cell
(cloud-in-cell scatter-add onto the whole grid, psum_scatter to the grid
blocks, Gauss's law as a cumulative sum along the sharded grid with
all_gathered block totals, the field all_gathered and interpolated back,
three pushes); pi by hit-or-miss with jax.random.fold_in(key,
axis_index) and pmean (the baseline draws the same blocks by a vmap over
the fold_in indices); self-normalised importance sampling on a 2 x 4 mesh
keyed by the linear device index, weighted sums and the effective sample
size psum'd; Metropolis sweeps of the 2-D Ising model on a periodic
lattice over a 2 x 2 mesh (checkerboard colours from global indices on 5 x
7 blocks, cyclic halos on both axes before each colour, the uniform
numbers given as an input so that both programs compute the same
function, the magnetisation psum'd per sweep); damped Jacobi on a CSR
matrix whose rows are over sp4 (rows of the nonzeros by searchsorted in
the replicated indptr, x all_gathered, segment_sum); graph Laplacian
smoothing with COO edges in no order over sp4 (scatter-add by segment_sum
into all nodes, psum'd; degrees the same way); a cumulative trapezoid
integral on a non-uniform grid over sp (the straddling interval from a halo
of x and f, lax.associative_scan, exclusive offsets from all_gathered
totals) with profiles over dp; a diffusion whose update is chosen by
lax.switch on the psum'd energy each step (halos exchanged before the
switch so the branches are local); and an inverse heat problem (a scalar
diffusivity and a row-sharded source fitted through 4 steps with halos, an
optax SGD step, check_vma=True).
Under GSPMD: periodic heat by jnp.roll on a 2 x 4 mesh, the fixed-boundary
heat scan with rows over sp4, a 3-D 7-point stencil with the field
constrained every step (z x y), the Poisson solve by jnp.fft.fft2 on a
row-sharded grid (XLA warns that it falls back to replicated execution for
the 2-D FFTs), matrix-free CG in a while_loop on a 2 x 2 mesh, power
iteration in a while_loop on the change of the Rayleigh quotient (rows over
sp8), the N-body Verlet with positions constrained over sp4, the Ising
sweeps with jnp.roll, importance sampling by a vmap over fold_in keys with
the replicas constrained over sp8, the cumulative trapezoid integral by
jnp.cumsum along the sharded axis, the CSR Jacobi smoother with the
nonzeros over sp4, learning a 3 x 3 stencil through two applications in an
Adam step (batch over x, columns over y), and fitting the spring constants
of a periodic chain through 8 velocity-Verlet steps in an Adam step.
Left out, as idioms of earlier batches: 1-D convolution halos (fresh6,
fresh11: here 2-D / 3-D stencils, corners, Dirichlet ghosts), the 2-D FFT
with a non-tiled all_to_all or a sharding constraint between passes (fresh7:
here a Poisson solve with tiled transposes and offset wavenumbers), a
cumsum continued across shards by a Hillis-Steele scan or an all_gather of
counts (fresh7, fresh9, fresh11: here a trapezoid rule with a straddling
interval and associative_scan), while_loop predicates from psum'd losses
in line searches (fresh8: here solver residuals), a GCN with all_gather of
node features (fresh11: here COO edges split arbitrarily, messages
psum'd).
Data-dependent control flow: every while_loop predicate of a correct
program is a globally reduced (replicated) value, so all devices run the
same number of iterations. Where a bug makes the predicate device-local,
the loop body holds no other collective (Kepler's Newton iteration), so
devices can stop at different iterations without waiting on each other;
the Jacobi bugs change the reduction (pmean, sqrt before psum) and hence the
iteration count on all devices alike; the lax.switch bug picks branches
from a local energy, the branches being collective-free.
Numerics (see "numerics" in the manifest): every correct pair agrees with
its baseline at rounding level (f32 within ~1e-5 of outputs up to ~100,
iteration counts, spins, random estimates and the bf16 stencil exactly).
Changed for its numerics: the Kepler local-tolerance bug first changed the
anomalies by only 6e-5 (Newton converges quadratically), so the programs
return the iteration count too (then off by 3); the CSR first draft
computed the diagonal by segment_sum, whose missing row offset divided by
zero (inf / NaN, which "numerics" skips), so the inverse diagonal is an
input; the importance-sampling mean-of-ratios bug drew 32 samples per
device instead of 128 to make the ratio bias clearer (2e-3 on an estimate
near 0.5). Nothing was dropped.
Each shard_map family has the bug variants a careless parallelisation makes
(a halo from the wrong neighbour, periodic where Dirichlet is meant or the
reverse, a missing corner, a one-sided halo, fixed boundary values
ignored, an energy or total psum'd over one axis or pmean'd, a CFL step
from a local maximum, a residual norm pmean'd or square-rooted before the
psum, a local convergence test, a checkerboard colour from local indices,
no halo refresh between colours, p.Ap or r.r not all-reduced, a Lanczos
alpha not reduced or beta pmean'd, wavenumbers without the block offset,
an FFT pass over the wrong axis, an FFT along the sharded axis without a
transpose, a self mask by local index, a ring one step short or masses not
rotated, a deposit not reduced, prefix offsets missing, fold_in with a
constant or one axis of two, psum for pmean, a mean of ratios, a CSR row
offset missing, messages or degrees not reduced, a straddling interval
dropped, a switch on a local predicate, a loss psum'd where it is
pmean'd).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh15.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh15.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh15.py"
C = Corpus("samples/fresh15", SCRIPT, "samples/gen/run_fresh15.sh", sys.argv[1:])
rng, R, I = seeded(1515)
psum, pmax, pmean, idx, ppermute = lax.psum, lax.pmax, lax.pmean, lax.axis_index, lax.ppermute


def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


def shift(n, d, cyclic):
    """ppermute pairs sending device i to device i + d (dropped past the
    ends unless cyclic)."""
    return [(i, (i + d) % n) for i in range(n) if cyclic or 0 <= i + d < n]


def halo(u, ax, n, axis, cyclic, w=1):
    """u with w cells from each neighbour along axis (ghosts from the
    previous device first); non-cyclic: zeros beyond the global ends."""
    k = u.shape[axis]
    last = lax.slice_in_dim(u, k - w, k, axis=axis)
    first = lax.slice_in_dim(u, 0, w, axis=axis)
    lo = ppermute(last, ax, shift(n, 1, cyclic))
    hi = ppermute(first, ax, shift(n, -1, cyclic))
    return jnp.concatenate([lo, u, hi], axis)


def lap5(up):
    """5-point Laplacian (unit spacing) of the interior of a padded grid."""
    return up[:-2, 1:-1] + up[2:, 1:-1] + up[1:-1, :-2] + up[1:-1, 2:] - 4 * up[1:-1, 1:-1]


def lap9(up):
    """9-point (Mehrstellen) Laplacian of the interior of a padded grid."""
    edge = up[:-2, 1:-1] + up[2:, 1:-1] + up[1:-1, :-2] + up[1:-1, 2:]
    corner = up[:-2, :-2] + up[:-2, 2:] + up[2:, :-2] + up[2:, 2:]
    return (4 * edge + corner - 20 * up[1:-1, 1:-1]) / 6


def roll_pad(u):
    """u padded periodically by one cell on both axes."""
    return jnp.pad(u, 1, mode="wrap")


# ===========================================================================
# Stencils with halo exchange
# ---------------------------------------------------------------------------
# 1. the 2-D heat equation, explicit 5-point stencil, rows over sp4, zero
#    Dirichlet boundaries (the ppermutes do not wrap, so the first and last
#    devices receive zeros), 6 steps in a lax.fori_loop.
H_DT = 0.2


def heat_dirichlet(u, steps=6):
    return lax.fori_loop(0, steps, lambda _, u: u + H_DT * lap5(jnp.pad(u, 1)), u)


def heat_rows(bug):
    def f(u):
        def step(_, u):
            if bug == "halo-from-wrong-neighbour":
                k = u.shape[0]
                lo = ppermute(u[:1], "sp", shift(4, -1, False))
                hi = ppermute(u[k - 1:], "sp", shift(4, 1, False))
                ur = jnp.concatenate([lo, u, hi], 0)
            else:
                ur = halo(u, "sp", 4, 0, cyclic=bug == "periodic-rows")
            return u + H_DT * lap5(jnp.pad(ur, ((0, 0), (1, 1))))
        return lax.fori_loop(0, 6, step, u)
    return f


C.smap("s.heat2d_5pt_rows_dirichlet_fori.sp4", {"sp": 4}, heat_rows, (P("sp"),), P("sp"), heat_dirichlet,
       (R(32, 16),), bugs=[("halo-from-wrong-neighbour", ["wrong-permutation"]),
                           ("periodic-rows", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 2. the 9-point stencil on a periodic grid over a 2 x 4 mesh (rows over x,
#    columns over y): rows exchanged first, then the columns of the
#    row-extended block, so the corner ghosts come from the diagonal
#    neighbour; 4 steps.
def heat9_periodic(u):
    return lax.fori_loop(0, 4, lambda _, u: u + 0.1 * lap9(roll_pad(u)), u)


def heat9_2d(bug):
    def f(u):
        def step(_, u):
            ur = halo(u, "x", 2, 0, True)
            if bug == "missing-corner":
                uc = halo(u, "y", 4, 1, True)
                z = jnp.zeros((1, 1), u.dtype)
                top = jnp.concatenate([z, ur[:1], z], 1)
                bot = jnp.concatenate([z, ur[-1:], z], 1)
                up = jnp.concatenate([top, uc, bot], 0)
            elif bug == "columns-swapped":
                k = ur.shape[1]
                lo = ppermute(ur[:, k - 1:], "y", shift(4, -1, True))
                hi = ppermute(ur[:, :1], "y", shift(4, 1, True))
                up = jnp.concatenate([lo, ur, hi], 1)
            else:
                up = halo(ur, "y", 4, 1, True)
            return u + 0.1 * lap9(up)
        return lax.fori_loop(0, 4, step, u)
    return f


C.smap("s.heat2d_9pt_periodic_corners.x2y4", {"x": 2, "y": 4}, heat9_2d, (P("x", "y"),), P("x", "y"),
       heat9_periodic, (R(16, 32),), bugs=[("missing-corner", ["missing-collective"]),
                                          ("columns-swapped", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 3. heat on a 2 x 2 mesh with a fixed boundary temperature tb on all four
#    sides (the ghost cells at the global edges set to tb where the
#    non-cyclic ppermute left zeros), 5 steps in a lax.scan that records the
#    total heat of every step (psum over both axes).
def heat_fixed(u, tb):
    def step(u, _):
        u = u + H_DT * lap5(jnp.pad(u, 1, constant_values=tb))
        return u, jnp.sum(u)
    return lax.scan(step, u, None, length=5)


def heat_fixed_2d(bug):
    def ghosts(u, ax, n, axis, tb):
        k = u.shape[axis]
        up = halo(u, ax, n, axis, cyclic=bug == "periodic-x" and ax == "x")
        if bug == "periodic-x" and ax == "x":
            return up
        pos = jnp.arange(k + 2).reshape((-1, 1) if axis == 0 else (1, -1))
        edge = ((pos == 0) & (idx(ax) == 0)) | ((pos == k + 1) & (idx(ax) == n - 1))
        return jnp.where(edge, tb, up)

    def f(u, tb):
        def step(u, _):
            up = ghosts(ghosts(u, "x", 2, 0, tb), "y", 2, 1, tb)
            u = u + H_DT * lap5(up)
            return u, psum(jnp.sum(u), "x" if bug == "heat-psum-x-only" else ("x", "y"))
        return lax.scan(step, u, None, length=5)
    return f


C.smap("s.heat2d_fixed_edges_scan_total.x2y2", {"x": 2, "y": 2}, heat_fixed_2d, (P("x", "y"), P()),
       (P("x", "y"), P()), heat_fixed, (R(12, 16), np.float32(1.5)),
       bugs=[("periodic-x", ["wrong-permutation"]), ("heat-psum-x-only", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 4. the 2-D wave equation by leapfrog, u_{n+1} = 2 u_n - u_{n-1} + c^2 dt^2
#    lap u_n, rows over sp4: the top and bottom boundary rows held at given
#    values (gtop, gbot), the side columns at zero; a lax.scan whose outputs
#    are the kinetic energy of each step (psum'd).
W_C2 = 0.25


def wave(u0, u1, gtop, gbot):
    def step(c, _):
        um, u = c
        up = jnp.pad(jnp.concatenate([gtop[None], u, gbot[None]], 0), ((0, 0), (1, 1)))
        un = 2 * u - um + W_C2 * lap5(up)
        return (u, un), 0.5 * jnp.sum(jnp.square(un - u))
    return lax.scan(step, (u0, u1), None, length=6)


def wave_rows(bug):
    def f(u0, u1, gtop, gbot):
        def step(c, _):
            um, u = c
            ur = halo(u, "sp", 4, 0, False)
            if bug != "edge-values-ignored":
                ur = ur.at[0].set(jnp.where(idx("sp") == 0, gtop, ur[0]))
                ur = ur.at[-1].set(jnp.where(idx("sp") == 3, gbot, ur[-1]))
            un = 2 * u - um + W_C2 * lap5(jnp.pad(ur, ((0, 0), (1, 1))))
            ke = 0.5 * jnp.sum(jnp.square(un - u))
            return (u, un), (pmean if bug == "energy-pmean" else psum)(ke, "sp")
        return lax.scan(step, (u0, u1), None, length=6)
    return f


w_u0 = R(16, 12, scale=0.5)
C.smap("s.wave2d_leapfrog_fixed_rows_energy.sp4", {"sp": 4}, wave_rows, (P("sp"), P("sp"), P(), P()),
       ((P("sp"), P("sp")), P()), wave,
       (w_u0, w_u0 + R(16, 12, scale=0.05), np.sin(np.linspace(0, np.pi, 12)).astype(np.float32),
        np.zeros(12, np.float32) + 0.3),
       bugs=[("edge-values-ignored", ["missing-collective"]), ("energy-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 5. a 3-D 7-point heat stencil in bf16 (stored bf16, computed in f32), z
#    over sp4, zero Dirichlet boundaries, 3 steps.
def lap7(up):
    c = up[1:-1, 1:-1, 1:-1]
    return (up[:-2, 1:-1, 1:-1] + up[2:, 1:-1, 1:-1] + up[1:-1, :-2, 1:-1] + up[1:-1, 2:, 1:-1]
            + up[1:-1, 1:-1, :-2] + up[1:-1, 1:-1, 2:] - 6 * c)


def heat3d(u):
    def step(_, u):
        uf = u.astype(jnp.float32)
        return (uf + 0.1 * lap7(jnp.pad(uf, 1))).astype(jnp.bfloat16)
    return lax.fori_loop(0, 3, step, u)


def heat3d_z(bug):
    def f(u):
        def step(_, u):
            uf = u.astype(jnp.float32)
            if bug == "one-sided-halo":
                uz = jnp.concatenate([ppermute(uf[-1:], "sp", shift(4, 1, False)), uf, jnp.zeros_like(uf[:1])], 0)
            else:
                uz = halo(uf, "sp", 4, 0, False)
            return (uf + 0.1 * lap7(jnp.pad(uz, ((0, 0), (1, 1), (1, 1))))).astype(jnp.bfloat16)
        return lax.fori_loop(0, 3, step, u)
    return f


C.smap("s.heat3d_7pt_bf16_z.sp4", {"sp": 4}, heat3d_z, (P("sp"),), P("sp"), heat3d,
       (R(16, 8, 8).astype(jnp.bfloat16),), bugs=[("one-sided-halo", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 6. first-order upwind advection of two periodic 1-D profiles with a
#    velocity field of either sign, the time step from the CFL condition on
#    the global max |c| (pmax), 8 steps; the grid over sp8.
AD_DX = 1.0 / 64


def advect(u, c):
    dt = 0.8 * AD_DX / jnp.max(jnp.abs(c))

    def step(_, u):
        left, right = jnp.roll(u, 1, 1), jnp.roll(u, -1, 1)
        du = jnp.where(c > 0, u - left, right - u) * c / AD_DX
        return u - dt * du
    return lax.fori_loop(0, 8, step, u)


def advect_sp(bug):
    def f(u, c):
        cmax = jnp.max(jnp.abs(c))
        dt = 0.8 * AD_DX / (cmax if bug == "cfl-local-max" else pmax(cmax, "sp"))

        def step(_, u):
            d = -1 if bug == "upwind-neighbours-swapped" else 1
            left = ppermute(u[:, -1:], "sp", shift(8, d, True))
            right = ppermute(u[:, :1], "sp", shift(8, -d, True))
            ue = jnp.concatenate([left, u, right], 1)
            du = jnp.where(c > 0, u - ue[:, :-2], ue[:, 2:] - u) * c / AD_DX
            return u - dt * du
        return lax.fori_loop(0, 8, step, u)
    return f


C.smap("s.advection_upwind_cfl_periodic.sp8", {"sp": 8}, advect_sp, (P(None, "sp"), P("sp")), P(None, "sp"),
       advect, (R(2, 64), np.sin(np.linspace(0, 2 * np.pi, 64, endpoint=False)).astype(np.float32)
                * np.linspace(0.3, 2.0, 64).astype(np.float32)),
       bugs=[("cfl-local-max", ["missing-all-reduce"]), ("upwind-neighbours-swapped", ["wrong-permutation"])])


# ===========================================================================
# Iterative solvers with a global convergence test
# ---------------------------------------------------------------------------
# 7. Jacobi for the Poisson equation -lap u = f (zero Dirichlet) on a 2 x 2
#    mesh, in a lax.while_loop until the 2-norm of the update (squares
#    psum'd over both axes) falls below a tolerance or 200 sweeps.
JA_TOL, JA_MAX = 2e-3, 200


def jacobi(f):
    def body(c):
        u, _, it = c
        un = 0.25 * (lap5(jnp.pad(u, 1)) + 4 * u + f)
        return un, jnp.sqrt(jnp.sum(jnp.square(un - u))), it + 1
    u, res, it = lax.while_loop(lambda c: (c[1] > JA_TOL) & (c[2] < JA_MAX), body,
                                (jnp.zeros_like(f), jnp.float32(jnp.inf), 0))
    return u, it


def jacobi_2d(bug):
    def f(rhs):
        def body(c):
            u, _, it = c
            up = halo(halo(u, "x", 2, 0, False), "y", 2, 1, False)
            un = 0.25 * (lap5(up) + 4 * u + rhs)
            sq = jnp.sum(jnp.square(un - u))
            if bug == "residual-pmean":
                res = jnp.sqrt(pmean(sq, ("x", "y")))
            elif bug == "sqrt-before-psum":
                res = psum(jnp.sqrt(sq), ("x", "y"))
            else:
                res = jnp.sqrt(psum(sq, ("x", "y")))
            return un, res, it + 1
        u, res, it = lax.while_loop(lambda c: (c[1] > JA_TOL) & (c[2] < JA_MAX), body,
                                    (jnp.zeros_like(rhs), jnp.float32(jnp.inf), 0))
        return u, it
    return f


C.smap("s.jacobi_poisson_while_psum_norm.x2y2", {"x": 2, "y": 2}, jacobi_2d, (P("x", "y"),), (P("x", "y"), P()),
       jacobi, (R(16, 16, scale=0.1),),
       bugs=[("residual-pmean", ["wrong-collective-op"]), ("sqrt-before-psum", ["numerics"])])


# ---------------------------------------------------------------------------
# 8. Newton's method for Kepler's equation E - e sin E = M, one orbit per
#    element, the orbits over sp4, in a lax.while_loop until the largest
#    |residual| over all orbits (pmax) is below 1e-3, returning the
#    anomalies and the iteration count. The loop body has no
#    collective but the pmax, so with a device-local test each device stops
#    at its own iteration (the low-eccentricity orbits sit on device 0).
KP_TOL = 1e-3


def kepler(m, e):
    def body(c):
        E, _, it = c
        E = E - (E - e * jnp.sin(E) - m) / (1 - e * jnp.cos(E))
        return E, jnp.max(jnp.abs(E - e * jnp.sin(E) - m)), it + 1
    E, _, it = lax.while_loop(lambda c: (c[1] > KP_TOL) & (c[2] < 50), body, (m, jnp.float32(jnp.inf), 0))
    return E, it


def kepler_sp(bug):
    def f(m, e):
        def body(c):
            E, _, it = c
            E = E - (E - e * jnp.sin(E) - m) / (1 - e * jnp.cos(E))
            r = jnp.max(jnp.abs(E - e * jnp.sin(E) - m))
            return E, r if bug == "local-tolerance" else pmax(r, "sp"), it + 1
        E, _, it = lax.while_loop(lambda c: (c[1] > KP_TOL) & (c[2] < 50), body, (m, jnp.float32(jnp.inf), 0))
        return E, it
    return f


C.smap("s.kepler_newton_while_pmax_tol.sp4", {"sp": 4}, kepler_sp, (P("sp"), P("sp")), (P("sp"), P()), kepler,
       (rng.uniform(0.05, 3.0, 32).astype(np.float32),
        np.concatenate([np.full(8, 0.05), np.full(8, 0.3), np.full(8, 0.6), np.full(8, 0.97)]).astype(np.float32)),
       bugs=[("local-tolerance", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 9. red-black Gauss-Seidel for -lap u = f on a 10 x 18 grid over a 2 x 2
#    mesh (5 x 9 blocks, so block offsets are odd and the colour of a cell
#    needs its global index), halos refreshed before each colour, 6 sweeps.
def rb_update(u, up, rhs, colour, par):
    return jnp.where(par == colour, 0.25 * (lap5(up) + 4 * u + rhs), u)


def redblack(f):
    par = (np.arange(10)[:, None] + np.arange(18)[None, :]) % 2

    def sweep(_, u):
        for c in (0, 1):
            u = rb_update(u, jnp.pad(u, 1), f, c, par)
        return u
    return lax.fori_loop(0, 6, sweep, jnp.zeros_like(f))


def redblack_2d(bug):
    def f(rhs):
        a, b = rhs.shape
        gi = jnp.arange(a)[:, None] + (0 if bug == "colour-local-parity" else idx("x") * a)
        gj = jnp.arange(b)[None, :] + (0 if bug == "colour-local-parity" else idx("y") * b)
        par = (gi + gj) % 2
        ex = lambda u: halo(halo(u, "x", 2, 0, False), "y", 2, 1, False)

        def sweep(_, u):
            up = ex(u)
            u = rb_update(u, up, rhs, 0, par)
            if bug != "no-halo-refresh":
                up = ex(u)
            else:
                up = up.at[1:-1, 1:-1].set(u)
            return rb_update(u, up, rhs, 1, par)
        return lax.fori_loop(0, 6, sweep, jnp.zeros_like(rhs))
    return f


C.smap("s.redblack_gauss_seidel_odd_blocks.x2y2", {"x": 2, "y": 2}, redblack_2d, (P("x", "y"),), P("x", "y"),
       redblack, (R(10, 18),), bugs=[("colour-local-parity", ["wrong-offset"]),
                                    ("no-halo-refresh", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 10. conjugate gradients for -lap u = b (zero Dirichlet), matrix-free with
#     row halos, rows over sp4; psum'd dot products, a lax.while_loop until
#     |r| < 1e-4 |b| or 60 iterations.
CG_TOL, CG_MAX = 1e-4, 60


def cg_solve(apply, b, dot):
    x = jnp.zeros_like(b)
    r = b
    rr = dot(r, r)
    stop = CG_TOL ** 2 * rr

    def body(c):
        x, r, p, rr, it = c
        ap = apply(p)
        alpha = rr / dot(p, ap)
        x, r = x + alpha * p, r - alpha * ap
        rn = dot(r, r)
        return x, r, r + (rn / rr) * p, rn, it + 1
    x, _, _, _, it = lax.while_loop(lambda c: (c[3] > stop) & (c[4] < CG_MAX), body, (x, r, r, rr, 0))
    return x, it


def cg_laplace(b):
    return cg_solve(lambda p: -lap5(jnp.pad(p, 1)), b, lambda a, c: jnp.sum(a * c))


def cg_rows(bug):
    def f(b):
        def apply(p):
            return -lap5(jnp.pad(halo(p, "sp", 4, 0, bug == "periodic-halo"), ((0, 0), (1, 1))))

        def dot(a, c):
            return psum(jnp.sum(a * c), "sp")
        rr = dot(b, b)
        stop = CG_TOL ** 2 * rr

        def body(c):
            x, r, p, rr, it = c
            ap = apply(p)
            pap = jnp.sum(p * ap) if bug == "pAp-not-reduced" else dot(p, ap)
            alpha = rr / pap
            x, r = x + alpha * p, r - alpha * ap
            rn = dot(r, r)
            return x, r, r + (rn / rr) * p, rn, it + 1
        x, _, _, _, it = lax.while_loop(lambda c: (c[3] > stop) & (c[4] < CG_MAX), body,
                                        (jnp.zeros_like(b), b, b, rr, 0))
        return x, it
    return f


C.smap("s.cg_matfree_laplacian_while.sp4", {"sp": 4}, cg_rows, (P("sp"),), (P("sp"), P()), cg_laplace,
       (R(16, 16),), bugs=[("pAp-not-reduced", ["missing-all-reduce"]), ("periodic-halo", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 11. conjugate gradients on a dense SPD matrix with its rows over sp4: the
#     search direction all_gathered for each mat-vec, 10 iterations in a
#     lax.fori_loop, the residual norm history returned.
def cg_dense(a, b):
    def body(i, c):
        x, r, p, rr, hist = c
        ap = a @ p
        alpha = rr / jnp.dot(p, ap)
        x, r = x + alpha * p, r - alpha * ap
        rn = jnp.dot(r, r)
        return x, r, r + (rn / rr) * p, rn, hist.at[i].set(jnp.sqrt(rn))
    x, *_, hist = lax.fori_loop(0, 10, body, (jnp.zeros_like(b), b, b, jnp.dot(b, b), jnp.zeros(10)))
    return x, hist


def cg_dense_rows(bug):
    def f(a, b):
        dot = lambda u, v: psum(jnp.dot(u, v), "sp")

        def body(i, c):
            x, r, p, rr, hist = c
            ap = a @ lax.all_gather(p, "sp", tiled=True)
            alpha = rr / dot(p, ap)
            x, r = x + alpha * p, r - alpha * ap
            rn = jnp.dot(r, r) if bug == "rr-not-reduced" else dot(r, r)
            return x, r, r + (rn / rr) * p, rn, hist.at[i].set(jnp.sqrt(rn))
        x, *_, hist = lax.fori_loop(0, 10, body, (jnp.zeros_like(b), b, b, dot(b, b), jnp.zeros(10)))
        return x, hist
    return f


cg_m = R(32, 32)
C.smap("s.cg_dense_rows_allgather_fori.sp4", {"sp": 4}, cg_dense_rows, (P("sp"), P("sp")), (P("sp"), P()),
       cg_dense, ((cg_m @ cg_m.T / 32 + np.eye(32, dtype=np.float32)).astype(np.float32), R(32)),
       bugs=[("rr-not-reduced", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 12. 6 Lanczos steps on a symmetric matrix with its rows over sp4 (the
#     vector all_gathered for the mat-vec, alpha and beta from psum'd dot
#     products), returning the tridiagonal coefficients.
def lanczos(a, v):
    v = v / jnp.linalg.norm(v)
    vp, beta = jnp.zeros_like(v), 0.0
    al, be = [], []
    for _ in range(6):
        w = a @ v
        alpha = jnp.dot(w, v)
        w = w - alpha * v - beta * vp
        beta = jnp.linalg.norm(w)
        vp, v = v, w / beta
        al.append(alpha)
        be.append(beta)
    return jnp.stack(al), jnp.stack(be)


def lanczos_rows(bug):
    def f(a, v):
        v = v / jnp.sqrt(psum(jnp.dot(v, v), "sp"))
        vp, beta = jnp.zeros_like(v), 0.0
        al, be = [], []
        for _ in range(6):
            w = a @ lax.all_gather(v, "sp", tiled=True)
            alpha = jnp.dot(w, v) if bug == "alpha-not-reduced" else psum(jnp.dot(w, v), "sp")
            w = w - alpha * v - beta * vp
            beta = jnp.sqrt((pmean if bug == "beta-pmean" else psum)(jnp.dot(w, w), "sp"))
            vp, v = v, w / beta
            al.append(alpha)
            be.append(beta)
        return jnp.stack(al), jnp.stack(be)
    return f


lz_m = R(32, 32)
C.smap("s.lanczos_rows_allgather.sp4", {"sp": 4}, lanczos_rows, (P("sp"), P("sp")), (P(), P()), lanczos,
       ((lz_m + lz_m.T) / 2, R(32)), bugs=[("alpha-not-reduced", ["missing-all-reduce"]),
                                          ("beta-pmean", ["wrong-collective-op"])])


# ===========================================================================
# Spectral methods
# ---------------------------------------------------------------------------
# 13. the periodic Poisson equation -lap phi = f on [0, 2 pi)^2 by FFT, rows
#     over sp4: an FFT along the local (column) axis, a tiled all_to_all to
#     column blocks, the FFT along the rows, phi_hat = f_hat / |k|^2 (the
#     mean mode set to 0) with the column wavenumbers at the block's offset,
#     and back the same way.
PF_N = 16
PF_K = (np.fft.fftfreq(PF_N) * PF_N).astype(np.float32)


def poisson_fft(f):
    k2 = PF_K[:, None] ** 2 + PF_K[None, :] ** 2
    fh = jnp.fft.fft2(f)
    ph = jnp.where(k2 > 0, fh / jnp.where(k2 > 0, k2, 1), 0)
    return jnp.real(jnp.fft.ifft2(ph))


def poisson_fft_sp(bug):
    def f(f):
        nl = f.shape[0]
        t = lax.all_to_all(jnp.fft.fft(f, axis=1), "sp", 1, 0, tiled=True)
        ax = 1 if bug == "second-pass-wrong-axis" else 0
        t = jnp.fft.fft(t, axis=ax)
        ky = lax.dynamic_slice(jnp.asarray(PF_K), ((0 if bug == "ky-without-offset" else idx("sp")) * nl,), (nl,))
        k2 = PF_K[:, None] ** 2 + ky[None, :] ** 2
        t = jnp.where(k2 > 0, t / jnp.where(k2 > 0, k2, 1), 0)
        t = lax.all_to_all(jnp.fft.ifft(t, axis=ax), "sp", 0, 1, tiled=True)
        return jnp.real(jnp.fft.ifft(t, axis=1))
    return f


pf_f = R(PF_N, PF_N)
C.smap("s.poisson_fft_alltoall_transpose.sp4", {"sp": 4}, poisson_fft_sp, (P("sp"),), P("sp"), poisson_fft,
       (pf_f - pf_f.mean(),), bugs=[("ky-without-offset", ["wrong-offset"]),
                                   ("second-pass-wrong-axis", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 14. a pseudo-spectral derivative d/dx of a periodic field whose x axis is
#     sharded over sp4: transposed by a tiled all_to_all so that x is local,
#     rfft, times i k (the Nyquist mode zeroed), irfft, transposed back.
SD_X = 32
SD_K = (np.fft.rfftfreq(SD_X) * SD_X).astype(np.float32)
SD_K[-1] = 0


def spectral_dx(u):
    return jnp.fft.irfft(1j * SD_K[:, None] * jnp.fft.rfft(u, axis=0), n=SD_X, axis=0)


def spectral_dx_sp(bug):
    def f(u):
        if bug == "no-transpose":
            n = u.shape[0]
            k = (np.fft.rfftfreq(n) * n).astype(np.float32)
            k[-1] = 0
            return jnp.fft.irfft(1j * k[:, None] * jnp.fft.rfft(u, axis=0), n=n, axis=0)
        t = lax.all_to_all(u, "sp", 1, 0, tiled=True)
        d = jnp.fft.irfft(1j * SD_K[:, None] * jnp.fft.rfft(t, axis=0), n=SD_X, axis=0)
        return lax.all_to_all(d, "sp", 0, 1, tiled=True)
    return f


sd_x = np.linspace(0, 2 * np.pi, SD_X, endpoint=False)[:, None]
C.smap("s.spectral_derivative_alltoall.sp4", {"sp": 4}, spectral_dx_sp, (P("sp"),), P("sp"), spectral_dx,
       ((np.sin(sd_x * np.arange(1, 9)) + 0.3 * np.cos(3 * sd_x + np.arange(8))).astype(np.float32),),
       bugs=[("no-transpose", ["missing-collective"])])


# ===========================================================================
# N-body and particles
# ---------------------------------------------------------------------------
# 15. all-pairs gravity with softening and a cutoff radius, the particles
#     over sp4 and the positions and masses all_gathered; velocity Verlet
#     for 5 steps in a lax.fori_loop, then the total energy (kinetic plus
#     potential, psum'd). The self pair is masked by global index.
NB_EPS2, NB_RC2, NB_DT = 0.01, 2.25, 0.01


def nb_accel(x, xa, m, ma, gi, gj):
    d = xa[None] - x[:, None]
    r2 = jnp.sum(d * d, -1) + NB_EPS2
    ok = (r2 < NB_RC2) & (gi[:, None] != gj[None, :])
    a = jnp.sum(jnp.where(ok, ma[None] / r2 ** 1.5, 0)[..., None] * d, 1)
    pe = -0.5 * jnp.sum(jnp.where(ok, m[:, None] * ma[None] / jnp.sqrt(r2), 0))
    return a, pe


def nbody(x, v, m):
    g = jnp.arange(x.shape[0])
    acc = lambda x: nb_accel(x, x, m, m, g, g)

    def step(_, c):
        x, v, a = c
        v = v + 0.5 * NB_DT * a
        x = x + NB_DT * v
        a, _ = acc(x)
        return x, v + 0.5 * NB_DT * a, a
    x, v, a = lax.fori_loop(0, 5, step, (x, v, acc(x)[0]))
    return x, v, 0.5 * jnp.sum(m[:, None] * v * v) + acc(x)[1]


def nbody_sp(bug):
    def f(x, v, m):
        n = x.shape[0]
        gi = jnp.arange(n) + (0 if bug == "self-mask-local-index" else idx("sp") * n)
        gj = jnp.arange(4 * n)
        ma = lax.all_gather(m, "sp", tiled=True)
        acc = lambda x: nb_accel(x, lax.all_gather(x, "sp", tiled=True), m, ma, gi, gj)

        def step(_, c):
            x, v, a = c
            v = v + 0.5 * NB_DT * a
            x = x + NB_DT * v
            a, _ = acc(x)
            return x, v + 0.5 * NB_DT * a, a
        x, v, a = lax.fori_loop(0, 5, step, (x, v, acc(x)[0]))
        e = 0.5 * jnp.sum(m[:, None] * v * v) + acc(x)[1]
        return x, v, e if bug == "energy-not-reduced" else psum(e, "sp")
    return f


C.smap("s.nbody_allgather_cutoff_verlet_energy.sp4", {"sp": 4}, nbody_sp, (P("sp"), P("sp"), P("sp")),
       (P("sp"), P("sp"), P()), nbody, (R(32, 3), R(32, 3, scale=0.1), rng.uniform(0.5, 1.5, 32).astype(np.float32)),
       bugs=[("self-mask-local-index", ["wrong-offset"]), ("energy-not-reduced", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 16. softened all-pairs gravity in 2-D with a ring: each device's block of
#     positions and masses travels around sp4 by ppermute, the forces
#     accumulated over the 4 blocks (own block first); kick-drift-kick
#     leapfrog for 4 steps in a lax.fori_loop.
def ring_contrib(x, xb, mb):
    d = xb[None] - x[:, None]
    r2 = jnp.sum(d * d, -1) + NB_EPS2
    return jnp.sum((mb[None] / r2 ** 1.5)[..., None] * d, 1)


def leapfrog(x, v, accel, steps=4, dt=0.02):
    def step(_, c):
        x, v = c
        v = v + 0.5 * dt * accel(x)
        x = x + dt * v
        return x, v + 0.5 * dt * accel(x)
    return lax.fori_loop(0, steps, step, (x, v))


def nbody_ring_ref(x, v, m):
    return leapfrog(x, v, lambda x: ring_contrib(x, x, m))


def nbody_ring(bug):
    def f(x, v, m):
        def accel(x):
            xb, mb = x, m
            a = ring_contrib(x, xb, mb)
            for _ in range(2 if bug == "ring-one-step-short" else 3):
                xb = ppermute(xb, "sp", shift(4, 1, True))
                if bug != "masses-not-rotated":
                    mb = ppermute(mb, "sp", shift(4, 1, True))
                a = a + ring_contrib(x, xb, mb)
            return a
        return leapfrog(x, v, accel)
    return f


C.smap("s.nbody_ring_ppermute_leapfrog.sp4", {"sp": 4}, nbody_ring, (P("sp"), P("sp"), P("sp")), (P("sp"), P("sp")),
       nbody_ring_ref, (R(32, 2), R(32, 2, scale=0.1), rng.uniform(0.5, 1.5, 32).astype(np.float32)),
       bugs=[("ring-one-step-short", ["missing-collective"]), ("masses-not-rotated", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 17. a 1-D electrostatic particle-in-cell step, 3 times: cloud-in-cell
#     deposition by scatter-add of each device's particles onto the whole
#     periodic grid, reduced and scattered to the grid blocks by psum_scatter;
#     Gauss's law E' = rho - 1 as a cumulative sum along the sharded grid
#     (block totals all_gathered for the offsets), mean removed; the field
#     all_gathered and interpolated back to the particles; push with wrap.
PIC_G, PIC_NP, PIC_DT = 32, 64, 0.05
PIC_DX = 1.0 / PIC_G


def cic(x):
    s = x / PIC_DX
    i = jnp.floor(s).astype(jnp.int32)
    return i % PIC_G, (i + 1) % PIC_G, s - i


def pic(x, v):
    def step(_, c):
        x, v, _ = c
        i0, i1, w = cic(x)
        rho = jnp.zeros(PIC_G).at[i0].add(1 - w).at[i1].add(w) * (PIC_G / PIC_NP)
        e = jnp.cumsum(rho - 1) * PIC_DX
        e = e - jnp.mean(e)
        v = v - (e[i0] * (1 - w) + e[i1] * w) * PIC_DT
        return jnp.mod(x + v * PIC_DT, 1.0), v, e
    return lax.fori_loop(0, 3, step, (x, v, jnp.zeros(PIC_G)))


def pic_sp(bug):
    def f(x, v):
        gl = PIC_G // 4

        def step(_, c):
            x, v, _ = c
            i0, i1, w = cic(x)
            full = jnp.zeros(PIC_G).at[i0].add(1 - w).at[i1].add(w) * (PIC_G / PIC_NP)
            if bug == "deposit-not-reduced":
                rho = lax.dynamic_slice(full, (idx("sp") * gl,), (gl,))
            else:
                rho = lax.psum_scatter(full, "sp", scatter_dimension=0, tiled=True)
            e = jnp.cumsum(rho - 1) * PIC_DX
            tot = lax.all_gather(e[-1], "sp")
            if bug != "prefix-offset-missing":
                e = e + jnp.sum(jnp.where(jnp.arange(4) < idx("sp"), tot, 0))
            e = e - psum(jnp.sum(e), "sp") / PIC_G
            ea = lax.all_gather(e, "sp", tiled=True)
            v = v - (ea[i0] * (1 - w) + ea[i1] * w) * PIC_DT
            return jnp.mod(x + v * PIC_DT, 1.0), v, e
        return lax.fori_loop(0, 3, step, (x, v, jnp.zeros(gl)))
    return f


pic_x0 = np.mod(np.linspace(0, 1, PIC_NP, endpoint=False) + 0.05 * np.sin(2 * np.pi * np.linspace(0, 1, PIC_NP)) + 0.003,
                1.0).astype(np.float32)
C.smap("s.pic_cic_deposit_psum_scatter_gauss.sp4", {"sp": 4}, pic_sp, (P("sp"), P("sp")), (P("sp"), P("sp"), P("sp")),
       pic, (rng.permutation(pic_x0), R(PIC_NP, scale=0.1)),
       bugs=[("deposit-not-reduced", ["missing-all-reduce"]), ("prefix-offset-missing", ["wrong-offset"])])


# ===========================================================================
# Monte Carlo
# ---------------------------------------------------------------------------
# 18. pi by hit-or-miss on 8 devices: one key per device by
#     jax.random.fold_in(key, axis_index), 256 points each, the estimates
#     pmean'd. The baseline draws the same 8 blocks (a vmap over the
#     fold_in indices), so both compute the same function of the seed.
def mc_block(k):
    u = jax.random.uniform(k, (256, 2))
    return 4.0 * jnp.mean((jnp.sum(u * u, -1) < 1.0).astype(jnp.float32))


def mc_pi(seed):
    key = jax.random.key(seed)
    return jnp.mean(jax.vmap(lambda i: mc_block(jax.random.fold_in(key, i)))(jnp.arange(8)))


def mc_pi_sp(bug):
    def f(seed):
        key = jax.random.fold_in(jax.random.key(seed), 0 if bug == "fold-in-constant" else idx("sp"))
        return (psum if bug == "psum-not-pmean" else pmean)(mc_block(key), "sp")
    return f


C.smap("s.mc_pi_fold_in_axis_index.sp8", {"sp": 8}, mc_pi_sp, (P(),), P(), mc_pi, (np.int32(2024),),
       bugs=[("fold-in-constant", ["wrong-offset"]), ("psum-not-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 19. self-normalised importance sampling of E[x^2] under p(x) ~ exp(-x^4)
#     from a standard normal proposal on a 2 x 4 mesh: the key folded with
#     the linear device index dp * 4 + sp, the weighted sums, the weight sum
#     and the sum of squared weights psum'd over both axes; returns the
#     estimate and the effective sample size.
def is_block(k):
    x = jax.random.normal(k, (32,))
    w = jnp.exp(-x ** 4 + 0.5 * x ** 2)
    return jnp.stack([jnp.sum(w * x * x), jnp.sum(w), jnp.sum(w * w)])


def is_est(seed):
    key = jax.random.key(seed)
    s = jnp.sum(jax.vmap(lambda i: is_block(jax.random.fold_in(key, i)))(jnp.arange(8)), 0)
    return s[0] / s[1], s[1] ** 2 / s[2]


def is_2d(bug):
    def f(seed):
        r = idx("sp") if bug == "fold-in-sp-only" else idx("dp") * 4 + idx("sp")
        s = is_block(jax.random.fold_in(jax.random.key(seed), r))
        t = psum(s, ("dp", "sp"))
        est = pmean(s[0] / s[1], ("dp", "sp")) if bug == "mean-of-ratios" else t[0] / t[1]
        return est, t[1] ** 2 / t[2]
    return f


C.smap("s.mc_self_normalised_is_two_axis_keys.dp2xsp4", {"dp": 2, "sp": 4}, is_2d, (P(),), (P(), P()), is_est,
       (np.int32(77),), bugs=[("fold-in-sp-only", ["wrong-collective-group"]), ("mean-of-ratios", ["numerics"])])


# ---------------------------------------------------------------------------
# 20. Metropolis sweeps of the 2-D Ising model on a periodic 10 x 14 lattice
#     over a 2 x 2 mesh (5 x 7 blocks: odd offsets, so the checkerboard
#     colour needs global indices): each colour's update after a fresh
#     cyclic halo exchange on both axes, the uniform numbers given as an
#     input (4 sweeps x 2 colours), the magnetisation of each sweep psum'd.
IS_BETA = 0.44


def nbsum(up):
    return up[:-2, 1:-1] + up[2:, 1:-1] + up[1:-1, :-2] + up[1:-1, 2:]


def ising(s, r):
    par = (np.arange(10)[:, None] + np.arange(14)[None, :]) % 2

    def sweep(s, rs):
        for c in (0, 1):
            nb = jnp.roll(s, 1, 0) + jnp.roll(s, -1, 0) + jnp.roll(s, 1, 1) + jnp.roll(s, -1, 1)
            flip = (par == c) & (rs[c] < jnp.exp(-IS_BETA * 2 * s * nb))
            s = jnp.where(flip, -s, s)
        return s, jnp.mean(s)
    return lax.scan(sweep, s, r)


def ising_2d(bug):
    def f(s, r):
        a, b = s.shape
        off = 0 if bug == "colour-local-parity" else 1
        par = (jnp.arange(a)[:, None] + off * idx("x") * a + jnp.arange(b)[None, :] + off * idx("y") * b) % 2
        cyc = bug != "open-boundary"

        def sweep(s, rs):
            for c in (0, 1):
                nb = nbsum(halo(halo(s, "x", 2, 0, cyc), "y", 2, 1, cyc))
                flip = (par == c) & (rs[c] < jnp.exp(-IS_BETA * 2 * s * nb))
                s = jnp.where(flip, -s, s)
            return s, psum(jnp.sum(s), ("x", "y")) / 140
        return lax.scan(sweep, s, r)
    return f


is_s = np.where(rng.uniform(size=(10, 14)) < 0.6, 1.0, -1.0).astype(np.float32)
is_r = rng.uniform(size=(4, 2, 10, 14)).astype(np.float32)
C.smap("s.ising_metropolis_checkerboard_halos.x2y2", {"x": 2, "y": 2}, ising_2d,
       (P("x", "y"), P(None, None, "x", "y")), (P("x", "y"), P()), ising, (is_s, is_r),
       bugs=[("colour-local-parity", ["wrong-offset"]), ("open-boundary", ["wrong-permutation"])])


# ===========================================================================
# Sparse linear algebra
# ---------------------------------------------------------------------------
# 21. damped Jacobi on a CSR matrix whose rows are over sp4 (each block of 8
#     rows holds 24 nonzeros, so the nonzeros split evenly too): the row of
#     each nonzero by searchsorted in the replicated indptr, made local by
#     the block's first row; x all_gathered for every product; segment_sum
#     per row; the inverse diagonal given (1/5); 8 iterations.
SP_N, SP_NNZ_BLK = 32, 24


def make_csr():
    counts = np.concatenate([rng.permutation([2, 2, 2, 3, 3, 4, 4, 4]) for _ in range(4)])
    cols, vals = [], []
    for i, c in enumerate(counts):
        off = rng.choice(np.setdiff1d(np.arange(SP_N), [i]), c - 1, replace=False)
        cols += [i] + sorted(off.tolist())
        vals += [5.0] + (-rng.uniform(0.3, 1.2, c - 1)).tolist()
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return np.array(vals, np.float32), np.array(cols, np.int32), indptr


def csr_rows(indptr, pos):
    return jnp.searchsorted(indptr, pos, side="right").astype(jnp.int32) - 1


def csr_jacobi(vals, cols, indptr, dinv, b):
    rows = csr_rows(indptr, jnp.arange(vals.shape[0]))

    def it(_, x):
        ax = jax.ops.segment_sum(vals * x[cols], rows, SP_N)
        return x + 0.8 * dinv * (b - ax)
    return lax.fori_loop(0, 8, it, jnp.zeros_like(b))


def csr_jacobi_sp(bug):
    def f(vals, cols, indptr, dinv, b):
        nl = b.shape[0]
        rows = csr_rows(indptr, idx("sp") * vals.shape[0] + jnp.arange(vals.shape[0]))
        rows = rows - (0 if bug == "row-offset-missing" else idx("sp") * nl)

        def it(_, x):
            xa = lax.all_gather(x, "sp", tiled=True)
            ax = jax.ops.segment_sum(vals * xa[cols], rows, nl)
            return x + 0.8 * dinv * (b - ax)
        return lax.fori_loop(0, 8, it, jnp.zeros_like(b))
    return f


sp_vals, sp_cols, sp_indptr = make_csr()
C.smap("s.csr_jacobi_searchsorted_rows.sp4", {"sp": 4}, csr_jacobi_sp, (P("sp"), P("sp"), P(), P("sp"), P("sp")),
       P("sp"), csr_jacobi, (sp_vals, sp_cols, sp_indptr, np.full(SP_N, 0.2, np.float32), R(SP_N)), bugs=[("row-offset-missing", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 22. graph Laplacian smoothing x <- x + tau (A x - D x) of node features on
#     a weighted undirected graph stored as COO edges split over sp4 in no
#     particular order: each device scatter-adds the messages of its edges
#     into all nodes (segment_sum by destination), psum'd; the degrees the
#     same way once; 5 steps; features replicated.
GL_N, GL_TAU = 24, 0.1


def graph_smooth(x, src, dst, w):
    deg = jax.ops.segment_sum(w, dst, GL_N)

    def step(_, x):
        return x + GL_TAU * (jax.ops.segment_sum(w[:, None] * x[src], dst, GL_N) - deg[:, None] * x)
    return lax.fori_loop(0, 5, step, x)


def graph_smooth_sp(bug):
    def f(x, src, dst, w):
        deg = jax.ops.segment_sum(w, dst, GL_N)
        if bug != "degree-local":
            deg = psum(deg, "sp")

        def step(_, x):
            msg = jax.ops.segment_sum(w[:, None] * x[src], dst, GL_N)
            return x + GL_TAU * ((msg if bug == "messages-not-reduced" else psum(msg, "sp")) - deg[:, None] * x)
        return lax.fori_loop(0, 5, step, x)
    return f


gl_e = rng.choice(GL_N * GL_N, 64, replace=False)
gl_s, gl_d = gl_e // GL_N, gl_e % GL_N
gl_keep = gl_s != gl_d
gl_s, gl_d = gl_s[gl_keep][:60], gl_d[gl_keep][:60]
gl_w = rng.uniform(0.2, 1.0, 60)
gl_perm = rng.permutation(120)
C.smap("s.graph_laplacian_coo_segment_sum.sp4", {"sp": 4}, graph_smooth_sp, (P(), P("sp"), P("sp"), P("sp")), P(),
       graph_smooth, (R(GL_N, 4), np.concatenate([gl_s, gl_d])[gl_perm].astype(np.int32),
                      np.concatenate([gl_d, gl_s])[gl_perm].astype(np.int32),
                      np.concatenate([gl_w, gl_w])[gl_perm].astype(np.float32)),
       bugs=[("messages-not-reduced", ["missing-all-reduce"]), ("degree-local", ["missing-all-reduce"])])


# ===========================================================================
# Prefix operations and control flow on global predicates
# ---------------------------------------------------------------------------
# 23. the cumulative trapezoid integral F(x_i) = int_{x_0}^{x_i} f dx of 4
#     profiles on a non-uniform grid, the grid over sp and the profiles over
#     dp: the interval that straddles two blocks by a halo of the previous
#     block's last point (x and f), the local prefix by lax.associative_scan,
#     the block totals all_gathered for the exclusive offsets.
def cumtrapz(f, x):
    inc = 0.5 * (f[:, 1:] + f[:, :-1]) * (x[1:] - x[:-1])
    return jnp.concatenate([jnp.zeros((f.shape[0], 1)), jnp.cumsum(inc, 1)], 1)


def cumtrapz_2d(bug):
    def f(f, x):
        first = idx("sp") == 0
        if bug == "boundary-interval-missing":
            inc = jnp.concatenate([jnp.zeros((f.shape[0], 1)), 0.5 * (f[:, 1:] + f[:, :-1]) * (x[1:] - x[:-1])], 1)
        else:
            xe = jnp.concatenate([ppermute(x[-1:], "sp", shift(4, 1, False)), x])
            fe = jnp.concatenate([ppermute(f[:, -1:], "sp", shift(4, 1, False)), f], 1)
            inc = 0.5 * (fe[:, 1:] + fe[:, :-1]) * (xe[1:] - xe[:-1])
            inc = inc.at[:, 0].set(jnp.where(first, 0.0, inc[:, 0]))
        loc = lax.associative_scan(jnp.add, inc, axis=1)
        if bug == "prefix-offsets-missing":
            return loc
        tots = lax.all_gather(loc[:, -1], "sp")
        return loc + jnp.sum(jnp.where((jnp.arange(4) < idx("sp"))[:, None], tots, 0), 0)[:, None]
    return f


ct_x = np.sort(rng.uniform(0, 4, 32)).astype(np.float32)
C.smap("s.cumtrapz_nonuniform_assoc_scan_offsets.dp2xsp4", {"dp": 2, "sp": 4}, cumtrapz_2d, (P("dp", "sp"), P("sp")),
       P("dp", "sp"), cumtrapz, (np.sin(ct_x[None] * np.arange(1, 5)[:, None]).astype(np.float32) + R(4, 32, scale=0.1),
                                  ct_x),
       bugs=[("prefix-offsets-missing", ["wrong-offset"]), ("boundary-interval-missing", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 24. a diffusion with a regime switch: every step picks one of three
#     updates by lax.switch on the global energy sum u^2 (psum'd) -- a
#     large explicit step, a small one, or a damped step with a cubic sink;
#     the halo exchange before the switch, so the branches are local.
#     Periodic grid, rows over sp4, 8 steps.
RS_THR = np.array([60.0, 150.0], np.float32)


def regime_branches():
    return [lambda u, l: u + 0.2 * l, lambda u, l: u + 0.1 * l, lambda u, l: u + 0.05 * l - 0.1 * u ** 3]


def regime_heat(u):
    def step(_, u):
        l = lap5(roll_pad(u))
        return lax.switch(jnp.searchsorted(RS_THR, jnp.sum(u * u)), regime_branches(), u, l)
    return lax.fori_loop(0, 8, step, u)


def regime_heat_sp(bug):
    def f(u):
        def step(_, u):
            up = jnp.pad(halo(u, "sp", 4, 0, True), ((0, 0), (1, 1)), mode="wrap")
            e = jnp.sum(u * u)
            e = e if bug == "local-energy-predicate" else psum(e, "sp")
            return lax.switch(jnp.searchsorted(RS_THR, e), regime_branches(), u, lap5(up))
        return lax.fori_loop(0, 8, step, u)
    return f


C.smap("s.switch_regime_on_psum_energy.sp4", {"sp": 4}, regime_heat_sp, (P("sp"),), P("sp"), regime_heat,
       (R(16, 16, scale=1.0),), bugs=[("local-energy-predicate", ["missing-all-reduce"])])


# ===========================================================================
# Training through a solver
# ---------------------------------------------------------------------------
# 25. an inverse heat problem: the diffusivity (a scalar) and a source field
#     fitted so that 4 explicit steps from u0 reach a target; the loss and
#     its gradient through the halo exchanges in a lax.fori_loop, an SGD
#     step (optax); rows over sp4, check_vma=True (the diffusivity's
#     gradient psum'd by the type system).
ih_opt = optax.sgd(0.5)


def ih_forward(p, u0, step_lap):
    return lax.fori_loop(0, 4, lambda _, u: u + 0.1 * (p["kappa"] * step_lap(u) + p["src"]), u0)


def inverse_heat(p, u0, target):
    loss, g = jax.value_and_grad(lambda p: mse(ih_forward(p, u0, lambda u: lap5(jnp.pad(u, 1))), target))(p)
    u, _ = ih_opt.update(g, ih_opt.init(p), p)
    return optax.apply_updates(p, u), loss


def inverse_heat_sp(bug):
    def lap(u):
        if bug == "halo-from-wrong-neighbour":
            k = u.shape[0]
            ur = jnp.concatenate([ppermute(u[:1], "sp", shift(4, -1, False)), u,
                                  ppermute(u[k - 1:], "sp", shift(4, 1, False))], 0)
        else:
            ur = halo(u, "sp", 4, 0, False)
        return lap5(jnp.pad(ur, ((0, 0), (1, 1))))

    def f(p, u0, target):
        def loss(p):
            l = mse(ih_forward(p, u0, lap), target)
            return psum(l, "sp") if bug == "loss-psum" else pmean(l, "sp")
        lv, g = jax.value_and_grad(loss)(p)
        u, _ = ih_opt.update(g, ih_opt.init(p), p)
        return optax.apply_updates(p, u), lv
    return f


ih_ps = {"kappa": P(), "src": P("sp")}
C.smap("s.inverse_heat_grad_through_halos_sgd.sp4", {"sp": 4}, inverse_heat_sp, (ih_ps, P("sp"), P("sp")),
       (ih_ps, P()), inverse_heat, ({"kappa": np.float32(0.8), "src": R(16, 16, scale=0.1)}, R(16, 16), R(16, 16)),
       bugs=[("halo-from-wrong-neighbour", ["wrong-permutation"]), ("loss-psum", ["wrong-collective-op"])],
       check_vma=True)


# ===========================================================================
# Under GSPMD: the same kinds of solvers under jax.jit with shardings
# ---------------------------------------------------------------------------
# 26. the periodic 2-D heat equation written with jnp.roll, 10 steps in a
#     lax.fori_loop, the grid over a 2 x 4 mesh.
def heat_roll(u):
    def step(_, u):
        l = jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1) + jnp.roll(u, -1, 1) - 4 * u
        return u + H_DT * l
    return lax.fori_loop(0, 10, step, u)


C.gspmd("g.heat2d_roll_periodic_fori.x2y4", {"x": 2, "y": 4}, (P("x", "y"),), P("x", "y"), heat_roll, (R(16, 32),))

# 27. the fixed-temperature heat scan of 3. (jnp.pad with the boundary value,
#     total heat per step) with the rows over sp4.
C.gspmd("g.heat2d_fixed_pad_scan_total.sp4", {"sp": 4}, (P("sp"), P()), (P("sp"), P()), heat_fixed,
        (R(16, 16), np.float32(1.5)))


# 28. the 3-D 7-point stencil in f32 with zero Dirichlet boundaries by
#     jnp.pad, z over one axis and y over another, the field constrained
#     after every step.
def heat3d_f32(u):
    def step(_, u):
        return wsc({"z": 2, "y": 4}, u + 0.1 * lap7(jnp.pad(u, 1)), "z", "y")
    return lax.fori_loop(0, 3, step, u)


C.gspmd("g.heat3d_7pt_pad_constrained.z2y4", {"z": 2, "y": 4}, (P("z", "y"),), P("z", "y"), heat3d_f32,
        (R(8, 16, 8),))

# 29. the FFT Poisson solve of 13. by jnp.fft.fft2 / ifft2 on a row-sharded
#     grid (the partitioner gathers the grid for the 2-D FFTs).
C.gspmd("g.poisson_fft2_rows.sp4", {"sp": 4}, (P("sp"),), P("sp"), poisson_fft, (pf_f - pf_f.mean(),))

# 30. matrix-free conjugate gradients of 10. (lax.while_loop on the residual
#     norm) with the grid over a 2 x 2 mesh.
C.gspmd("g.cg_matfree_laplacian_while.x2y2", {"x": 2, "y": 2}, (P("x", "y"),), (P("x", "y"), P()), cg_laplace,
        (R(16, 16),))


# 31. power iteration for the dominant eigenpair of a symmetric positive
#     matrix with its rows over sp8: a lax.while_loop until the eigenvalue
#     estimate (Rayleigh quotient) changes by less than 1e-4 relative, or 200
#     iterations.
def power_iter(a, v):
    def body(c):
        v, lam, _, it = c
        w = a @ v
        v = w / jnp.linalg.norm(w)
        return v, jnp.dot(v, a @ v), lam, it + 1
    v, lam, _, it = lax.while_loop(lambda c: (jnp.abs(c[1] - c[2]) > 1e-4 * jnp.abs(c[1])) & (c[3] < 200), body,
                                   (v / jnp.linalg.norm(v), jnp.float32(1.0), jnp.float32(0.0), 0))
    return v, lam, it


pw_m = R(64, 16)
C.gspmd("g.power_iteration_while_rows.sp8", {"sp": 8}, (P("sp"), P()), (P(), P(), P()), power_iter,
        ((pw_m @ pw_m.T / 16).astype(np.float32), R(64)))


# 32. the softened all-pairs gravity of 15. with velocity Verlet, written for
#     one device with the positions constrained over sp4 at every step.
def nbody_constrained(x, v, m):
    g = jnp.arange(x.shape[0])
    acc = lambda x: nb_accel(x, x, m, m, g, g)

    def step(_, c):
        x, v, a = c
        v = v + 0.5 * NB_DT * a
        x = wsc({"sp": 4}, x + NB_DT * v, "sp")
        a, _ = acc(x)
        return x, v + 0.5 * NB_DT * a, a
    x, v, a = lax.fori_loop(0, 5, step, (x, v, acc(x)[0]))
    return x, v, 0.5 * jnp.sum(m[:, None] * v * v) + acc(x)[1]


C.gspmd("g.nbody_cutoff_verlet_constrained.sp4", {"sp": 4}, (P("sp"), P("sp"), P("sp")), (P("sp"), P("sp"), P()),
        nbody_constrained, (R(32, 3), R(32, 3, scale=0.1), rng.uniform(0.5, 1.5, 32).astype(np.float32)))

# 33. the Ising sweeps of 20. (jnp.roll neighbours) with the lattice and the
#     random field over a 2 x 2 mesh.
C.gspmd("g.ising_checkerboard_roll.x2y2", {"x": 2, "y": 2}, (P("x", "y"), P(None, None, "x", "y")), (P("x", "y"), P()),
        ising, (is_s, is_r))


# 34. importance sampling with one key per replica as a vmap over fold_in
#     indices, the replica axis constrained over sp8 (the partitioner
#     splits the random number generation).
def is_vmap(seed):
    key = jax.random.key(seed)
    x = wsc({"sp": 8}, jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), (64,)))(jnp.arange(8)), "sp")
    w = jnp.exp(-x ** 4 + 0.5 * x ** 2)
    return jnp.sum(w * x * x) / jnp.sum(w), jnp.sum(w, 1)


C.gspmd("g.importance_sampling_vmap_fold_in.sp8", {"sp": 8}, (P(),), (P(), P("sp")), is_vmap, (np.int32(5),))

# 35. the cumulative trapezoid integral of 23. with jnp.cumsum along the
#     sharded grid axis.
C.gspmd("g.cumtrapz_cumsum_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("sp")), P("dp", "sp"), cumtrapz,
        (np.cos(ct_x[None] * np.arange(1, 5)[:, None]).astype(np.float32), ct_x))

# 36. the CSR Jacobi smoother of 21. with the nonzeros over sp4 and x, b and
#     the inverse diagonal over sp4.
C.gspmd("g.csr_jacobi_segment_sum.sp4", {"sp": 4}, (P("sp"), P("sp"), P(), P("sp"), P("sp")), P("sp"), csr_jacobi,
        (sp_vals, sp_cols, sp_indptr, np.full(SP_N, 0.2, np.float32), R(SP_N)))

# ---------------------------------------------------------------------------
# 37. learning a 3 x 3 stencil (replicated) so that two applications to a
#     batch of periodic fields reach their targets, an Adam step; the
#     batch over x and the field columns over y.
ls_opt = optax.adam(0.05)


def apply_stencil(w, u):
    up = jnp.pad(u, ((0, 0), (1, 1), (1, 1)), mode="wrap")
    h, v = u.shape[1], u.shape[2]
    return sum(w[i, j] * up[:, i:i + h, j:j + v] for i in range(3) for j in range(3))


def stencil_step(w, st, u, y):
    lv, g = jax.value_and_grad(lambda w: mse(apply_stencil(w, apply_stencil(w, u)), y))(w)
    upd, st = ls_opt.update(g, st, w)
    return optax.apply_updates(w, upd), st, lv


ls_w = R(3, 3, scale=0.3)
ls_st = np_tree(ls_opt.init(ls_w))
C.gspmd("g.learn_stencil_adam.x2y4", {"x": 2, "y": 4}, (P(), state_specs(ls_st, P()), P("x", None, "y"),
        P("x", None, "y")), (P(), state_specs(ls_st, P()), P()), stencil_step,
        (ls_w, ls_st, R(4, 8, 16), R(4, 8, 16)))


# 38. fitting the spring constants of a periodic chain of 32 masses so that
#     8 velocity-Verlet steps end at target positions, an Adam step; the
#     springs and the masses over sp4.
sc_opt = optax.adam(0.02)


def chain_final(k, x, v):
    def force(x):
        t = k * (jnp.roll(x, -1) - x)
        return t - jnp.roll(t, 1)

    def step(_, c):
        x, v = c
        v = v + 0.5 * 0.1 * force(x)
        x = x + 0.1 * v
        return x, v + 0.5 * 0.1 * force(x)
    return lax.fori_loop(0, 8, step, (x, v))[0]


def chain_step(k, st, x, v, y):
    lv, g = jax.value_and_grad(lambda k: mse(chain_final(k, x, v), y))(k)
    upd, st = sc_opt.update(g, st, k)
    return optax.apply_updates(k, upd), st, lv


sc_k = rng.uniform(0.5, 1.5, 32).astype(np.float32)
sc_st = np_tree(sc_opt.init(sc_k))
C.gspmd("g.fit_spring_chain_verlet_adam.sp4", {"sp": 4},
        (P("sp"), state_specs(sc_st, P("sp")), P("sp"), P("sp"), P("sp")), (P("sp"), state_specs(sc_st, P("sp")), P()),
        chain_step, (sc_k, sc_st, R(32, scale=0.3), R(32, scale=0.1), R(32, scale=0.3)))
# Bug variants one execution does not show yet (the corpus test asserts they stay
# unverified and prints them as open).
MISS_OWNED = ("on random inputs the correct program too drops nonzeros whose rows lie outside their device's block (random row pointers ignore the split), so execution decides nothing for either")
C.known_miss("s.csr_jacobi_searchsorted_rows.sp4.bug.row-offset-missing", MISS_OWNED)

C.finish()
