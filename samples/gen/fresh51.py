"""samples/fresh51: a 51st batch of programs as a user writes them, on the theme of distributed dense linear algebra written by hand in current JAX shard_map (SUMMA, Cannon, ring matmuls, tall-skinny QR, CholeskyQR, block Gram-Schmidt, power / subspace / block-Jacobi iterations with fixed counts) plus GSPMD versions of the same products, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. SUMMA on a 4 x 2 grid (r4 x c2) with rectangular blocks: panel width 4
    (half of A's local width, all of B's local height), A's sub-panel t
    sliced at local offset (t % 2) * 4 and broadcast along the row by an
    all_gather over c indexed at its owner t // 2, B's panel broadcast down
    the column by an all_gather over r indexed at t, in a lax.fori_loop with
    dynamic indexing. Bugs: A's owner t % 2 (panel from the wrong step), B's
    panel from step t + 1, A's sub-panel gathered over r.
 2. SUMMA on a 2 x 4 grid in bf16 with f32 accumulation, a lax.scan over
    the steps: A's whole local block gathered over c (panel t = index t),
    B's sub-panel sliced at (t % 2) * 8 and gathered over r at owner t // 2.
    Bugs: B's sub-panel always at offset 0, A's panel gathered over r.
 3. Cannon's algorithm on a dp2 x r2 x c2 mesh (a batch of matmuls over dp):
    the skew as a conditional neighbour shift (ppermute, kept where the row /
    column index is 1), then two multiply-shift steps (einsum). Bugs: A
    skewed by its column index, B shifted along c in the steps, B not skewed.
 4. Cannon's algorithm on r2 x c2 with the skew by gathering and indexing:
    A's block (i, (i + j) % 2) picked from an all_gather over c, B's block
    ((i + j) % 2, j) from an all_gather over r, then ppermute shifts.
    Bugs: A indexed at j (no skew), A shifted along r.
 5. 1-D ring all-gather matmul (x rows over tp4, w columns over tp4) inside
    a loss, with jax.value_and_grad through the ring (check_vma=True): the
    loss psum'd over tp, gradients for x and w. Bugs: block written at the
    index of the wrong ring direction, the mean over the local count.
 6. matmul-reduce-scatter ring on dp2 x tp4 (K over tp, partial sums sent
    to the right in a fori_loop, the destination block (me - s - 1) % n).
    Bugs: partial sums shifted over dp, block index (me + s + 1) % n.
 7. tall-skinny QR on dp8: local jnp.linalg.qr, R factors all_gather'd and
    stacked in device order, QR of the stack, Q = Q_local @ Q2's block of
    this device; signs normalised (diag R > 0). Bugs: R factors stacked in
    reverse order, every device taking Q2's first block.
 8. butterfly TSQR on sp4 (R only): at levels 1 and 2 the partner's R by
    ppermute (XOR partner), [own; partner] stacked and re-factorised (the
    order differs between partners, yet R is the same up to signs, which
    are normalised). Bugs: level 2 missing, the own R stacked twice.
 9. CholeskyQR2 on dp4: Gram X^T X psum'd, Cholesky, a triangular solve,
    twice; R = R2 R1. Bugs: Gram not psum'd, Gram pmean'd.
10. block classical Gram-Schmidt on sp4, panels of 2 columns: projection
    coefficients psum'd, then CholeskyQR of the panel. Bugs: coefficients
    not psum'd, the panel taken from the previous step's columns.
11. power iteration for the top eigenvector of a batch of symmetric matrices
    on dp2 x tp4 (rows over tp, 40 steps in a fori_loop), the Rayleigh
    quotient psum'd. Bugs: norm from the local squares, Rayleigh quotient
    not psum'd.
12. subspace iteration with CholeskyQR on dp8 (A's rows over dp, 4 vectors,
    12 steps in lax.scan), then the Rayleigh-Ritz matrix psum'd. Bugs:
    Gram not psum'd, Rayleigh-Ritz matrix from the local rows only.
13. block-Jacobi solve on tp4 (the diagonal block at the device's column
    offset, 3 steps so the iterate still depends on the
    preconditioner, jnp.linalg.solve per block). Bugs: diagonal block at
    offset 0, the diagonal block transposed.
14. PCA on dp4 x tp2: column means and covariance psum'd over dp, then three
    cyclic Jacobi eigenvalue sweeps (6 rotations each, unrolled, guarded
    against a zero off-diagonal) on the replicated 4 x 4 matrix, returning
    eigenvalues and eigenvectors. Bugs: covariance not psum'd, covariance
    psum'd over tp.
15. classical Gram-Schmidt with reorthogonalisation (CGS2), column by
    column on sp4, coefficients and squared norms psum'd (no LAPACK). Bugs:
    the second pass's coefficients not psum'd, the norm from local squares.
16. CholeskyQR with a hand-written Cholesky and back substitution (no
    LAPACK custom calls), rows over the tuple ('dp', 'tp'), the Gram matrix
    psum'd over both axes. Bugs: Gram psum'd over dp only, the solve with
    the lower factor.
GSPMD pairs (jax.jit with in/out shardings): 14. SUMMA's layout matmul on
r4 x c2; 15. CholeskyQR2 of a row-sharded matrix on dp4; 16. batched power
iteration on dp2 x tp4; 17. the ring-matmul loss with its gradient on tp4;
18. a Gram matrix of a matrix over (dp4, tp2); 19. a sign-normalised
Householder QR (jnp.linalg.qr) of a row-sharded tall matrix on dp8; 20.
Cannon's batched block layout (einsum) on dp2 x r2 x c2; 21. the PCA of 14.;
22. the hand-written CholeskyQR of 16.
Left out, as idioms of earlier batches: SUMMA with masked psum panels and
Cannon with a tuple-axis ppermute skew (fresh13), the all-gather matmul
ring in fori_loop with the last block outside (fresh13).
Numerics: see "numerics" of the manifest.
Run from the repository root: bash samples/gen/run_fresh51.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.scipy.linalg import solve_triangular
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh51.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh51.py"
C = Corpus("samples/fresh51", SCRIPT, "samples/gen/run_fresh51.sh", sys.argv[1:])
rng, R, I = seeded(5151)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index


def left(n):
    return [(i, (i - 1) % n) for i in range(n)]


def right(n):
    return [(i, (i + 1) % n) for i in range(n)]


def sym(n, b=None):
    a = R(*((b,) if b else ()), n, n)
    return ((a + np.swapaxes(a, -1, -2)) / 2 + np.diag(np.linspace(3.0, 0.0, n)).astype(np.float32) * 2).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. SUMMA, r4 x c2, panels of 4 broadcast by all_gather + index in fori_loop
def summa_r4c2(bug):
    def f(a, b):
        kb = 4

        def step(t, acc):
            off = (t % 2) * kb
            sub = lax.dynamic_slice_in_dim(a, off, kb, 1)
            ag = lax.all_gather(sub, "r" if bug == "a-gathered-over-r" else "c")
            owner = t % 2 if bug == "a-owner-mod" else t // 2
            ap = ag[owner]
            bt = (t + 1) % 4 if bug == "b-panel-next-step" else t
            bp = lax.all_gather(b, "r")[bt]
            return acc + ap @ bp
        return lax.fori_loop(0, 4, step, jnp.zeros((a.shape[0], b.shape[1]), jnp.float32))
    return f


C.smap("s.summa_subpanel_allgather_index_fori.r4xc2", {"r": 4, "c": 2}, summa_r4c2, (P("r", "c"), P("r", "c")),
       P("r", "c"), lambda a, b: a @ b, (R(16, 16), R(16, 8, scale=0.5)),
       bugs=[("a-owner-mod", ["wrong-offset"]), ("b-panel-next-step", ["wrong-offset"]),
             ("a-gathered-over-r", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 2. SUMMA, r2 x c4, bf16 panels, f32 accumulation, lax.scan over steps
def bf16_mm(a, b):
    return jnp.matmul(a, b, preferred_element_type=jnp.float32)


def summa_scan_bf16(bug):
    def f(a, b):
        kb = a.shape[1]  # 8

        def step(acc, t):
            ap = lax.all_gather(a, "r" if bug == "a-gathered-over-r" else "c")[t % 2 if bug == "a-gathered-over-r" else t]
            off = 0 if bug == "b-offset-zero" else (t % 2) * kb
            bp = lax.all_gather(lax.dynamic_slice_in_dim(b, off, kb, 0), "r")[t // 2]
            return acc + jnp.dot(ap, bp, preferred_element_type=jnp.float32), None
        acc, _ = lax.scan(step, jnp.zeros((a.shape[0], b.shape[1]), jnp.float32), jnp.arange(4))
        return acc
    return f


bf = lambda x: x.astype(jnp.bfloat16)
C.smap("s.summa_scan_bf16_f32acc.r2xc4", {"r": 2, "c": 4}, summa_scan_bf16, (P("r", "c"), P("r", "c")),
       P("r", "c"), bf16_mm, (bf(R(8, 32)), bf(R(32, 16, scale=0.5))),
       bugs=[("b-offset-zero", ["wrong-offset"]), ("a-gathered-over-r", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 3. Cannon, dp2 x r2 x c2, skew as a conditional neighbour shift
def cannon_cond(bug):
    def f(a, b):
        ri, ci = idx("r"), idx("c")
        swap = right(2)
        sa = lax.ppermute(a, "c", swap)
        a = jnp.where((ci if bug == "a-skew-by-column" else ri) == 1, sa, a)
        if bug != "b-not-skewed":
            sb = lax.ppermute(b, "r", swap)
            b = jnp.where(ci == 1, sb, b)
        c = jnp.zeros(a.shape[:2] + b.shape[2:], jnp.float32)
        for s in range(2):
            c = c + jnp.einsum("bik,bkj->bij", a, b)
            a = lax.ppermute(a, "c", left(2))
            b = lax.ppermute(b, "c" if bug == "b-shift-along-c" else "r", left(2))
        return c
    return f


C.smap("s.cannon_conditional_skew_batched.dp2xr2xc2", {"dp": 2, "r": 2, "c": 2}, cannon_cond,
       (P("dp", "r", "c"), P("dp", "r", "c")), P("dp", "r", "c"), lambda a, b: jnp.einsum("bik,bkj->bij", a, b),
       (R(2, 8, 12), R(2, 12, 8, scale=0.5)),
       bugs=[("a-skew-by-column", ["wrong-permutation"]), ("b-shift-along-c", ["wrong-collective-group"]),
             ("b-not-skewed", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 4. Cannon, r2 x c2, skew by all_gather + dynamic index
def cannon_gather(bug):
    def f(a, b):
        ri, ci = idx("r"), idx("c")
        a = lax.all_gather(a, "c")[ci if bug == "a-not-skewed" else (ri + ci) % 2]
        b = lax.all_gather(b, "r")[(ri + ci) % 2]
        c = a @ b
        a = lax.ppermute(a, "r" if bug == "a-shift-along-r" else "c", left(2))
        b = lax.ppermute(b, "r", left(2))
        return c + a @ b
    return f


C.smap("s.cannon_gathered_skew.r2xc2", {"r": 2, "c": 2}, cannon_gather, (P("r", "c"), P("r", "c")), P("r", "c"),
       lambda a, b: a @ b, (R(12, 8), R(8, 16, scale=0.5)),
       bugs=[("a-not-skewed", ["wrong-offset"]), ("a-shift-along-r", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 5. ring all-gather matmul inside a loss, value_and_grad through the ring
RM, RK, RN = 16, 8, 12


def ring_loss_ref(x, w, t):
    def loss(x, w):
        return jnp.mean(jnp.square(x @ w - t))
    l, (gx, gw) = jax.value_and_grad(loss, argnums=(0, 1))(x, w)
    return l, gx, gw


def ring_grad(bug):
    def f(x, w, t):
        n = 4
        me = idx("tp")

        def ring_mm(x, w):
            ys = jnp.zeros((n,) + x.shape[:1] + w.shape[1:], jnp.float32)
            cur = x
            for s in range(n):
                src = (me - s) % n if bug == "ring-index-wrong-direction" else (me + s) % n
                ys = lax.dynamic_update_index_in_dim(ys, cur @ w, src, 0)
                if s < n - 1:
                    cur = lax.ppermute(cur, "tp", left(n))
            return ys.reshape(-1, w.shape[1])

        def loss(x, w):
            d = ring_mm(x, w) - t
            cnt = d.size if bug == "mean-over-local-count" else RM * RN
            return psum(jnp.sum(d * d), "tp") / cnt
        l, (gx, gw) = jax.value_and_grad(loss, argnums=(0, 1))(x, w)
        return l, gx, gw
    return f


C.smap("s.ring_allgather_matmul_value_and_grad.tp4", {"tp": 4}, ring_grad, (P("tp", None), P(None, "tp"), P(None, "tp")),
       (P(), P("tp", None), P(None, "tp")), ring_loss_ref, (R(RM, RK), R(RK, RN, scale=0.5), R(RM, RN)),
       bugs=[("ring-index-wrong-direction", ["wrong-permutation"]), ("mean-over-local-count", ["wrong-scale"])],
       check_vma=True)


# ---------------------------------------------------------------------------
# 6. matmul-reduce-scatter ring on dp2 x tp4
def rs_ring(bug):
    def f(x, w):
        n = 4
        me = idx("tp")
        nb = w.shape[1] // n

        def blk(s):
            j = (me + s + 1) % n if bug == "block-index-plus" else (me - s - 1) % n
            return x @ lax.dynamic_slice_in_dim(w, j * nb, nb, 1)

        def body(s, acc):
            if bug == "shift-over-dp":
                acc = lax.ppermute(acc, "dp", right(2))
            else:
                acc = lax.ppermute(acc, "tp", right(n))
            return acc + blk(s)
        return lax.fori_loop(1, n, body, blk(0))
    return f


C.smap("s.matmul_reducescatter_ring_fori.dp2xtp4", {"dp": 2, "tp": 4}, rs_ring, (P("dp", "tp"), P("tp", None)),
       P("dp", "tp"), lambda x, w: x @ w, (R(8, 32), R(32, 16, scale=0.3)),
       bugs=[("shift-over-dp", ["wrong-collective-group"]), ("block-index-plus", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 7. TSQR on dp8 with Q
def signfix(q, r):
    s = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0).astype(r.dtype)
    return q * s[None, :], r * s[:, None]


def qr_ref(x):
    return signfix(*jnp.linalg.qr(x))


def tsqr(bug):
    def f(x):
        n = 8
        q1, r1 = jnp.linalg.qr(x)
        rs = lax.all_gather(r1, "dp")  # (n, k, k)
        if bug == "r-stacked-reversed":
            rs = rs[::-1]
        k = r1.shape[1]
        q2, r = jnp.linalg.qr(rs.reshape(n * k, k))
        j = 0 if bug == "q2-first-block" else idx("dp")
        q = q1 @ lax.dynamic_slice_in_dim(q2, j * k, k, 0)
        return signfix(q, r)
    return f


C.smap("s.tsqr_allgather_r_stack_q.dp8", {"dp": 8}, tsqr, (P("dp", None),), (P("dp", None), P()), qr_ref,
       (R(64, 6),), bugs=[("r-stacked-reversed", ["wrong-permutation"]), ("q2-first-block", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 8. butterfly TSQR on sp4, R only, [own; partner] stacking
def r_ref(x):
    return qr_ref(x)[1]


def tsqr_butterfly(bug):
    def f(x):
        n = 4
        r = jnp.linalg.qr(x, mode="r")
        for k in ([1] if bug == "level-2-missing" else [1, 2]):
            other = r if bug == "own-r-twice" else lax.ppermute(r, "sp", [(i, i ^ k) for i in range(n)])
            r = jnp.linalg.qr(jnp.concatenate([r, other], 0), mode="r")
        s = jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0)
        return r * s[:, None]
    return f


C.smap("s.tsqr_butterfly_xor_own_first.sp4", {"sp": 4}, tsqr_butterfly, (P("sp", None),), P(), r_ref,
       (R(32, 5),), bugs=[("level-2-missing", ["missing-collective"]), ("own-r-twice", ["missing-collective"])])


# ---------------------------------------------------------------------------
# 9. CholeskyQR2 on dp4
def cholqr(x, gram):
    r = jnp.linalg.cholesky(gram(x.T @ x)).T
    return solve_triangular(r, x.T, trans="T", lower=False).T, r


def cholqr2_ref(x):
    q, r1 = cholqr(x, lambda g: g)
    q, r2 = cholqr(q, lambda g: g)
    return q, r2 @ r1


def cholqr2(bug):
    def gram(g):
        if bug == "gram-local":
            return g
        return pmean(g, "dp") if bug == "gram-pmean" else psum(g, "dp")

    def f(x):
        q, r1 = cholqr(x, gram)
        q, r2 = cholqr(q, gram)
        return q, r2 @ r1
    return f


C.smap("s.cholesky_qr2_psum_gram.dp4", {"dp": 4}, cholqr2, (P("dp", None),), (P("dp", None), P()), cholqr2_ref,
       (R(32, 6),), bugs=[("gram-local", ["missing-all-reduce"]), ("gram-pmean", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 10. block classical Gram-Schmidt on sp4, panels of 2 columns, CholQR inside
def bcgs_ref(x):
    qs = []
    for j in range(x.shape[1] // 2):
        v = x[:, 2 * j:2 * j + 2]
        if qs:
            qp = jnp.concatenate(qs, 1)
            v = v - qp @ (qp.T @ v)
        qs.append(cholqr(v, lambda g: g)[0])
    return jnp.concatenate(qs, 1)


def bcgs(bug):
    def f(x):
        qs = []
        for j in range(x.shape[1] // 2):
            jj = max(j - 1, 0) if bug == "panel-prev-step" else j
            v = x[:, 2 * jj:2 * jj + 2]
            if qs:
                qp = jnp.concatenate(qs, 1)
                cf = qp.T @ v
                if bug != "coeff-not-psummed":
                    cf = psum(cf, "sp")
                v = v - qp @ cf
            qs.append(cholqr(v, lambda g: psum(g, "sp"))[0])
        return jnp.concatenate(qs, 1)
    return f


C.smap("s.block_gram_schmidt_cholqr_panels.sp4", {"sp": 4}, bcgs, (P("sp", None),), P("sp", None), bcgs_ref,
       (R(32, 8),), bugs=[("coeff-not-psummed", ["missing-all-reduce"]), ("panel-prev-step", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 11. batched power iteration on dp2 x tp4
PI_STEPS = 40


def power_ref(a, v):
    def body(_, v):
        w = jnp.einsum("bij,bj->bi", a, v)
        return w / jnp.linalg.norm(w, axis=1, keepdims=True)
    v = lax.fori_loop(0, PI_STEPS, body, v)
    return v, jnp.einsum("bi,bij,bj->b", v, a, v)


def power_iter(bug):
    def f(a, v):
        def body(_, v):
            w = jnp.einsum("bij,bj->bi", a, v)
            sq = jnp.sum(w * w, 1, keepdims=True)
            if bug != "norm-local":
                sq = psum(sq, "tp")
            return lax.all_gather(w / jnp.sqrt(sq), "tp", axis=1, tiled=True)
        v = lax.fori_loop(0, PI_STEPS, body, v)
        me, nl = idx("tp"), a.shape[1]
        vl = lax.dynamic_slice_in_dim(v, me * nl, nl, 1)
        lam = jnp.einsum("bi,bij,bj->b", vl, a, v)
        return v, (lam if bug == "rayleigh-not-psummed" else psum(lam, "tp"))
    return f


C.smap("s.power_iteration_batched_rows_tp.dp2xtp4", {"dp": 2, "tp": 4}, power_iter, (P("dp", "tp", None), P("dp", None)),
       (P("dp", None), P("dp")), power_ref, (sym(16, 2), R(2, 16)),
       bugs=[("norm-local", ["missing-all-reduce"]), ("rayleigh-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 12. subspace iteration with CholeskyQR on dp8, Rayleigh-Ritz at the end
SI_STEPS = 12


def subspace_ref(a, v):
    def step(v, _):
        return cholqr(a @ v, lambda g: g)[0], None
    v, _ = lax.scan(step, v, None, length=SI_STEPS)
    return v, v.T @ a @ v


def subspace(bug):
    def f(a, v):
        gram = (lambda g: g) if bug == "gram-local" else (lambda g: psum(g, "dp"))

        def step(v, _):
            ql, _ = cholqr(a @ v, gram)
            return lax.all_gather(ql, "dp", tiled=True), None
        v, _ = lax.scan(step, v, None, length=SI_STEPS)
        nl = a.shape[0]
        vl = lax.dynamic_slice_in_dim(v, idx("dp") * nl, nl, 0)
        h = vl.T @ (a @ v)
        return v, (h if bug == "ritz-local" else psum(h, "dp"))
    return f


def orth(n, k):
    return np.linalg.qr(R(n, k))[0].astype(np.float32)


C.smap("s.subspace_iteration_cholqr_ritz.dp8", {"dp": 8}, subspace, (P("dp", None), P()), (P(), P()), subspace_ref,
       (sym(32), orth(32, 4)), bugs=[("gram-local", ["missing-all-reduce"]), ("ritz-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 13. block-Jacobi solve on tp4
BJ_STEPS, BJ_N, BJ_B = 3, 16, 4  # few steps: converged iterates forget D


def bjacobi_ref(a, b):
    nb = BJ_N // BJ_B
    x = jnp.zeros_like(b)
    for _ in range(BJ_STEPS):
        r = b - a @ x
        dx = [jnp.linalg.solve(a[i * BJ_B:(i + 1) * BJ_B, i * BJ_B:(i + 1) * BJ_B], r[i * BJ_B:(i + 1) * BJ_B])
              for i in range(nb)]
        x = x + jnp.concatenate(dx)
    return x


def bjacobi(bug):
    def f(a, b):
        nl = a.shape[0]
        off = 0 if bug == "diag-block-offset-zero" else idx("tp") * nl
        d = lax.dynamic_slice_in_dim(a, off, nl, 1)
        if bug == "diag-block-transposed":
            d = d.T
        x = jnp.zeros((BJ_N,), a.dtype)
        for _ in range(BJ_STEPS):
            xl = lax.dynamic_slice_in_dim(x, idx("tp") * nl, nl)
            xl = xl + jnp.linalg.solve(d, b - a @ x)
            x = lax.all_gather(xl, "tp", tiled=True)
        return x
    return f


def diag_dom(n):
    a = R(n, n, scale=0.3)
    return (a + np.diag(np.abs(a).sum(1) + 1.0)).astype(np.float32)


C.smap("s.block_jacobi_solve_diag_block.tp4", {"tp": 4}, bjacobi, (P("tp", None), P("tp")), P(), bjacobi_ref,
       (diag_dom(BJ_N), R(BJ_N)),
       bugs=[("diag-block-offset-zero", ["wrong-offset"]), ("diag-block-transposed", ["wrong-value"])])


# ---------------------------------------------------------------------------
# 14. PCA: the covariance psum'd over dp (tp replicated), then 3 cyclic Jacobi
#     sweeps (rotations unrolled) on the replicated 4 x 4 matrix
def jacobi_eig(a, sweeps=3):
    n = a.shape[0]
    v = jnp.eye(n, dtype=a.dtype)
    for _ in range(sweeps):
        for p in range(n):
            for q in range(p + 1, n):
                apq = a[p, q]
                small = jnp.abs(apq) < 1e-12
                theta = (a[q, q] - a[p, p]) / (2.0 * jnp.where(small, 1.0, apq))
                t = jnp.sign(theta) / (jnp.abs(theta) + jnp.sqrt(theta * theta + 1.0))
                t = jnp.where(small, 0.0, jnp.where(theta == 0, 1.0, t))
                c = lax.rsqrt(t * t + 1.0)
                s = t * c
                j = jnp.eye(n, dtype=a.dtype).at[p, p].set(c).at[q, q].set(c).at[p, q].set(s).at[q, p].set(-s)
                a = j.T @ a @ j
                v = v @ j
    return jnp.diagonal(a), v


def pca_ref(x):
    xc = x - jnp.mean(x, 0)
    return jacobi_eig(xc.T @ xc / x.shape[0])


def pca_jacobi(bug):
    def f(x):
        n = 32
        mu = psum(jnp.sum(x, 0), "dp") / n
        xc = x - mu
        cov = xc.T @ xc
        if bug == "cov-psum-over-tp":
            cov = psum(cov, "tp")
        elif bug != "cov-local":
            cov = psum(cov, "dp")
        return jacobi_eig(cov / n)
    return f


C.smap("s.pca_psum_cov_cyclic_jacobi_sweeps.dp4xtp2", {"dp": 4, "tp": 2}, pca_jacobi, (P("dp", None),), (P(), P()),
       pca_ref, (R(32, 4) * np.array([3.0, 2.0, 1.0, 0.5], np.float32),),
       bugs=[("cov-local", ["missing-all-reduce"]), ("cov-psum-over-tp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 15. CGS2 column by column on sp4 (no LAPACK): coefficients and norms psum'd
def cgs2_ref(x):
    qs = []
    for j in range(x.shape[1]):
        v = x[:, j]
        for _ in range(2):
            if qs:
                q = jnp.stack(qs, 1)
                v = v - q @ (q.T @ v)
        qs.append(v / jnp.sqrt(jnp.sum(v * v)))
    return jnp.stack(qs, 1)


def cgs2(bug):
    def f(x):
        qs = []
        for j in range(x.shape[1]):
            v = x[:, j]
            for p in range(2):
                if qs:
                    q = jnp.stack(qs, 1)
                    cf = q.T @ v
                    if not (bug == "reorth-coeff-not-psummed" and p == 1):
                        cf = psum(cf, "sp")
                    v = v - q @ cf
            ss = jnp.sum(v * v)
            qs.append(v / jnp.sqrt(ss if bug == "norm-local" else psum(ss, "sp")))
        return jnp.stack(qs, 1)
    return f


C.smap("s.cgs2_columns_psum_coeffs.sp4", {"sp": 4}, cgs2, (P("sp", None),), P("sp", None), cgs2_ref,
       (R(32, 6) + R(1, 6) * 2.0,),
       bugs=[("reorth-coeff-not-psummed", ["missing-all-reduce"]), ("norm-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 16. CholeskyQR with a hand-written Cholesky and back substitution (no
#     LAPACK), rows over the tuple ('dp', 'tp')
def chol_hand(g):
    n = g.shape[0]
    l = jnp.zeros_like(g)
    for j in range(n):
        d = jnp.sqrt(g[j, j] - jnp.sum(l[j, :j] ** 2))
        l = l.at[j, j].set(d)
        for i in range(j + 1, n):
            l = l.at[i, j].set((g[i, j] - jnp.dot(l[i, :j], l[j, :j])) / d)
    return l


def right_solve_upper(x, r):
    """q with q r = x, column by column."""
    cols = []
    for j in range(r.shape[0]):
        c = x[:, j]
        for k in range(j):
            c = c - cols[k] * r[k, j]
        cols.append(c / r[j, j])
    return jnp.stack(cols, 1)


def cholqr_hand_ref(x):
    r = chol_hand(x.T @ x).T
    return right_solve_upper(x, r), r


def cholqr_hand(bug):
    def f(x):
        g = psum(x.T @ x, "dp" if bug == "gram-psum-dp-only" else ("dp", "tp"))
        l = chol_hand(g)
        r = l if bug == "solve-with-lower" else l.T
        return right_solve_upper(x, r), l.T
    return f


C.smap("s.cholqr_handwritten_chol_tuple_axes.dp4xtp2", {"dp": 4, "tp": 2}, cholqr_hand, (P(("dp", "tp"), None),),
       (P(("dp", "tp"), None), P()), cholqr_hand_ref, (R(32, 4) + R(1, 4),),
       bugs=[("gram-psum-dp-only", ["wrong-collective-group"]), ("solve-with-lower", ["wrong-value"])])


# ===========================================================================
# GSPMD
C.gspmd("g.summa_layout_matmul.r4xc2", {"r": 4, "c": 2}, (P("r", "c"), P("r", "c")), P("r", "c"),
        lambda a, b: a @ b, (R(16, 16), R(16, 8, scale=0.5)))
C.gspmd("g.cholesky_qr2_rows.dp4", {"dp": 4}, (P("dp", None),), (P("dp", None), P()), cholqr2_ref, (R(32, 6),))
C.gspmd("g.power_iteration_batched.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", "tp", None), P("dp", None)),
        (P("dp", None), P("dp")), power_ref, (sym(16, 2), R(2, 16)))
C.gspmd("g.matmul_loss_value_and_grad.tp4", {"tp": 4}, (P("tp", None), P(None, "tp"), P(None, "tp")),
        (P(), P("tp", None), P(None, "tp")), ring_loss_ref, (R(RM, RK), R(RK, RN, scale=0.5), R(RM, RN)))
C.gspmd("g.gram_matrix_2d.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", "tp"),), P("tp", None), lambda x: x.T @ x,
        (R(32, 8),))
C.gspmd("g.householder_qr_signfixed_rows.dp8", {"dp": 8}, (P("dp", None),), (P("dp", None), P()), qr_ref,
        (R(64, 6),))
C.gspmd("g.cannon_layout_batched_einsum.dp2xr2xc2", {"dp": 2, "r": 2, "c": 2}, (P("dp", "r", "c"), P("dp", "r", "c")),
        P("dp", "r", "c"), lambda a, b: jnp.einsum("bik,bkj->bij", a, b), (R(2, 8, 12), R(2, 12, 8, scale=0.5)))
C.gspmd("g.pca_cov_jacobi_sweeps.dp4xtp2", {"dp": 4, "tp": 2}, (P("dp", None),), (P(), P()), pca_ref,
        (R(32, 4) * np.array([3.0, 2.0, 1.0, 0.5], np.float32),))

C.gspmd("g.cholqr_handwritten_rows.dp4xtp2", {"dp": 4, "tp": 2}, (P(("dp", "tp"), None),), (P(("dp", "tp"), None), P()),
        cholqr_hand_ref, (R(32, 4) + R(1, 4),))

C.finish()
