"""samples/fresh50: a 50th batch of programs as a user writes them, on the
theme of optimal transport and kernel methods under sharding in current JAX
(Sinkhorn iterations, entropic OT losses and their gradients, MMD, kernel
ridge regression and kernel mean embeddings with a sharded Gram matrix,
Performer random-feature attention, Nystrom approximations, pairwise
distances with the other set all_gather'd), none of them an idiom of
samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. log-domain Sinkhorn (10 iterations in a lax.fori_loop, eps 0.2) with the
    cost matrix's rows over dp4: the row potential f is local, the column
    potential g a log-sum-exp over all rows (pmax of the local maxima, psum
    of the shifted exp sums); returns the plan (rows over dp), the
    transport cost (psum) and g. Bugs: g's logsumexp over the local shard
    only, the shift a local max while the sums are psum'd.
 2. standard-domain (scaling) Sinkhorn, 6 unrolled iterations, the cost
    matrix's columns over tp4, the column marginal b passed replicated and
    sliced at the device's column offset: u = a / (K v) with K v psum'd
    over tp, v = b / (K^T u) local (einsum). Returns the plan (columns over
    tp), its row sums and the cost. Bugs: row normalisation using the local
    column sums (K v without psum), b sliced at the next shard's offset.
 3. log-domain Sinkhorn on a 2 x 4 mesh (rows over dp, columns over tp),
    written with lax.scan; f's log-sum-exp over tp, g's over dp (max
    pmax'd, sums psum'd); returns f, g and the dual value <f,a> + <g,b>.
    Bugs: f's logsumexp over the local shard only, f's reduction over dp
    instead of tp.
 4. an entropic OT loss (unrolled log-domain Sinkhorn from a squared
    Euclidean cost between moving points x over dp4 and fixed points y)
    differentiated by jax.value_and_grad inside the body (check_vma=True,
    the shift pmax'd of a stop_gradient), two optax.sgd (momentum) steps;
    returns x and both losses. Bugs: g's logsumexp over the local shard,
    loss pmean'd instead of psum'd (gradients a quarter).
 5. unbiased MMD^2 between two sample sets, both over dp4, with both sets
    all_gather'd, local rows of Kxx, Kyy, Kxy, diagonals removed at the
    device's global row offset, sums psum'd. Bugs: cross term counted twice
    (Kxy rows and Kyx rows both summed), diagonal at the local row index.
 6. weighted kernel mean embeddings of two sample sets over dp8 evaluated
    at replicated points and their witness function; numerators and weight
    totals psum'd. Bugs: missing psum in the kernel mean (numerator
    local), numerator pmean'd.
 7. kernel ridge regression by 5 conjugate-gradient iterations
    (fori_loop) on a Gram matrix whose rows are over dp4 (training points
    all_gather'd, the ridge on the diagonal at the global row offset, the
    search direction all_gather'd for the mat-vec, inner products psum'd),
    predictions on replicated test points psum'd. Bugs: ridge at the local
    row index, predictions not psum'd.
 8. Performer (FAVOR+) non-causal attention, the sequence over sp4, the
    random features passed in as an input, positive softmax-kernel features
    with a per-query stabiliser and a key stabiliser pmax'd over the whole
    sequence, K'^T V and the normaliser psum'd. Bugs: normaliser not
    psum'd, key stabiliser a local max.
 9. Performer attention with the random features split over tp on a dp2 x
    tp4 mesh (batch over dp): each tp rank slices its block of the
    replicated feature matrix at its offset, numerator and normaliser
    psum'd over tp. Bugs: feature block offset by the dp index (the wrong
    shard), normaliser not psum'd.
10. causal Performer with ReLU features, the sequence over sp4: local
    cumulative sums of phi(k) v^T and phi(k) plus an exclusive prefix of
    the all_gather'd block totals. Bugs: an inclusive prefix, no prefix.
11. Nystrom kernel ridge regression over dp8 with replicated landmarks:
    C^T C and C^T y psum'd, the ridge lambda W added once, predictions at
    replicated test points, and the Nystrom feature map C W^-1/2 (eigh) of
    the local rows. Bugs: lambda W added on every shard before the psum,
    C^T y not psum'd.
12. pairwise distances and the Chamfer distance between two point sets
    over dp4 with the other set all_gather'd: nearest-neighbour indices of
    the local x, min over y local, min over x pmin'd. Bugs: the y-side
    minimum not pmin'd, the |y|^2 terms from the local y shard tiled.
13. nearest neighbours by a ring instead of an all_gather: y blocks
    ppermute'd around dp4, a running min and argmin with the block owner's
    index offset. Bugs: one rotation short, the owner counted the wrong way
    round the ring.
14. unbiased MMD^2 on bf16 inputs upcast to f32, dp8, the diagonal removed
    as the trace of the local diagonal block (dynamic_slice at the row
    offset). Bugs: the next shard's block, cross term counted twice.
15. kernel ridge by 6 Richardson steps with the Gram matrix's columns over
    dp4: K alpha as a psum_scatter of the local column block times the
    local alpha. Bugs: psum then the next shard's block, the ridge scaled
    by the number of shards.
GSPMD pairs (jax.jit with in/out shardings; correct): 16. log-domain
Sinkhorn of 1. with the cost rows over dp8; 17. unbiased MMD^2 of 5. with
both sets over dp8; 18. Performer attention of 8. with the sequence over
sp4; 19. two optax.adam steps (jax.value_and_grad) on the entropic OT
loss with x over dp and y over tp on dp2 x tp4; 20. CG kernel ridge
regression of 7. over dp4; 21. Nystrom regression of 11. over dp8;
22. causal ReLU Performer of 10. with the sequence over sp4.
(Both Nystrom bugs (11.) were known misses while the witness could not run
jnp.linalg.solve's LAPACK custom call; it runs them now.)
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics" in the manifest).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh50.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh50.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh50.py"
C = Corpus("samples/fresh50", SCRIPT, "samples/gen/run_fresh50.sh", sys.argv[1:])
rng, R, I = seeded(5050)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
lse = jax.nn.logsumexp


def sqdist(a, b):
    d2 = jnp.sum(a * a, 1)[:, None] + jnp.sum(b * b, 1)[None, :] - 2.0 * a @ b.T
    return jnp.maximum(d2, 0.0)


def rbf(a, b, ls=1.0):
    return jnp.exp(-sqdist(a, b) / (2.0 * ls * ls))


def log_weights(n):
    w = rng.uniform(0.5, 1.5, n)
    return np.log(w / w.sum()).astype(np.float32)


def cost_matrix(n, m, d=3):
    x, y = rng.standard_normal((n, d)), rng.standard_normal((m, d)) + 0.3
    c = ((x[:, None] - y[None]) ** 2).sum(-1)
    return (c / c.mean()).astype(np.float32)


# ---------------------------------------------------------------------------
# 1. log-domain Sinkhorn, cost rows over dp4.
EPS1, IT1 = 0.2, 10
N1, M1 = 16, 12
C1, LA1, LB1 = cost_matrix(N1, M1), log_weights(N1), log_weights(M1)


def sinkhorn_log(Cm, la, lb):
    def it(_, fg):
        f, g = fg
        f = -EPS1 * lse((g[None, :] - Cm) / EPS1 + lb[None, :], axis=1)
        g = -EPS1 * lse((f[:, None] - Cm) / EPS1 + la[:, None], axis=0)
        return f, g
    f, g = lax.fori_loop(0, IT1, it, (jnp.zeros(Cm.shape[0]), jnp.zeros(Cm.shape[1])))
    Pm = jnp.exp((f[:, None] + g[None, :] - Cm) / EPS1 + la[:, None] + lb[None, :])
    return Pm, jnp.sum(Pm * Cm), g


def sinkhorn_log_rows(bug):
    def col_lse(z):
        if bug == "g-lse-local-shard":
            return lse(z, axis=0)
        mx = jnp.max(z, 0)
        if bug != "shift-local-max":
            mx = pmax(mx, "dp")
        return mx + jnp.log(psum(jnp.sum(jnp.exp(z - mx[None, :]), 0), "dp"))

    def body(Cl, la, lb):
        def it(_, fg):
            f, g = fg
            f = -EPS1 * lse((g[None, :] - Cl) / EPS1 + lb[None, :], axis=1)
            g = -EPS1 * col_lse((f[:, None] - Cl) / EPS1 + la[:, None])
            return f, g
        f, g = lax.fori_loop(0, IT1, it, (jnp.zeros(Cl.shape[0]), jnp.zeros(Cl.shape[1])))
        Pl = jnp.exp((f[:, None] + g[None, :] - Cl) / EPS1 + la[:, None] + lb[None, :])
        return Pl, psum(jnp.sum(Pl * Cl), "dp"), g
    return body


C.smap("s.sinkhorn_log_cost_rows.dp4", {"dp": 4}, sinkhorn_log_rows, (P("dp"), P("dp"), P()),
       (P("dp"), P(), P()), sinkhorn_log, (C1, LA1, LB1),
       bugs=[("g-lse-local-shard", ["missing-all-reduce"]), ("shift-local-max", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. scaling Sinkhorn, cost columns over tp4, b replicated and sliced.
EPS2, IT2 = 0.5, 6
N2 = M2 = 16
C2 = cost_matrix(N2, M2)
A2, B2 = np.exp(log_weights(N2)), np.exp(log_weights(M2))


def sinkhorn_scaling(Cm, a, b):
    K = jnp.exp(-Cm / EPS2)
    u, v = jnp.ones_like(a), jnp.ones_like(b)
    for _ in range(IT2):
        u = a / (K @ v)
        v = b / (K.T @ u)
    Pm = u[:, None] * K * v[None, :]
    return Pm, Pm.sum(1), jnp.sum(Pm * Cm)


def sinkhorn_scaling_cols(bug):
    def body(Cl, a, b):
        ml = Cl.shape[1]
        shard = (idx("tp") + 1) % 4 if bug == "b-slice-next-shard" else idx("tp")
        bl = lax.dynamic_slice_in_dim(b, shard * ml, ml)
        K = jnp.exp(-Cl / EPS2)
        u, v = jnp.ones_like(a), jnp.ones_like(bl)
        for _ in range(IT2):
            Kv = jnp.einsum("ij,j->i", K, v)
            if bug != "row-norm-local-col-sums":
                Kv = psum(Kv, "tp")
            u = a / Kv
            v = bl / jnp.einsum("ij,i->j", K, u)
        Pl = u[:, None] * K * v[None, :]
        return Pl, psum(Pl.sum(1), "tp"), psum(jnp.sum(Pl * Cl), "tp")
    return body


C.smap("s.sinkhorn_scaling_cost_cols.tp4", {"tp": 4}, sinkhorn_scaling_cols, (P(None, "tp"), P(), P()),
       (P(None, "tp"), P(), P()), sinkhorn_scaling, (C2, A2, B2),
       bugs=[("row-norm-local-col-sums", ["missing-all-reduce"]), ("b-slice-next-shard", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. log-domain Sinkhorn on dp2 x tp4 (rows over dp, columns over tp), scan.
EPS3, IT3 = 0.25, 8
N3, M3 = 8, 16
C3, LA3, LB3 = cost_matrix(N3, M3), log_weights(N3), log_weights(M3)


def sinkhorn_2d_ref(Cm, la, lb):
    def step(fg, _):
        f, g = fg
        f = -EPS3 * lse((g[None, :] - Cm) / EPS3 + lb[None, :], axis=1)
        g = -EPS3 * lse((f[:, None] - Cm) / EPS3 + la[:, None], axis=0)
        return (f, g), None
    (f, g), _ = lax.scan(step, (jnp.zeros(Cm.shape[0]), jnp.zeros(Cm.shape[1])), None, length=IT3)
    return f, g, jnp.dot(f, jnp.exp(la)) + jnp.dot(g, jnp.exp(lb))


def dist_lse(z, axis, name):
    mx = pmax(jnp.max(z, axis, keepdims=True), name)
    return jnp.squeeze(mx, axis) + jnp.log(psum(jnp.sum(jnp.exp(z - mx), axis), name))


def sinkhorn_2d(bug):
    def body(Cl, la, lb):
        def step(fg, _):
            f, g = fg
            z = (g[None, :] - Cl) / EPS3 + lb[None, :]
            if bug == "f-lse-local-shard":
                f = -EPS3 * lse(z, axis=1)
            else:
                f = -EPS3 * dist_lse(z, 1, "dp" if bug == "f-lse-over-dp" else "tp")
            g = -EPS3 * dist_lse((f[:, None] - Cl) / EPS3 + la[:, None], 0, "dp")
            return (f, g), None
        (f, g), _ = lax.scan(step, (jnp.zeros(Cl.shape[0]), jnp.zeros(Cl.shape[1])), None, length=IT3)
        val = psum(jnp.dot(f, jnp.exp(la)), "dp") + psum(jnp.dot(g, jnp.exp(lb)), "tp")
        return f, g, val
    return body


C.smap("s.sinkhorn_log_2d_rows_cols.dp2xtp4", {"dp": 2, "tp": 4}, sinkhorn_2d, (P("dp", "tp"), P("dp"), P("tp")),
       (P("dp"), P("tp"), P()), sinkhorn_2d_ref, (C3, LA3, LB3),
       bugs=[("f-lse-local-shard", ["missing-all-reduce"]), ("f-lse-over-dp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 4. entropic OT loss, jax.value_and_grad inside the body, two optax.sgd steps.
EPS4, IT4 = 0.5, 6
N4, M4, D4 = 16, 12, 3
X4, Y4 = R(N4, D4), R(M4, D4) + 0.5
LA4, LB4 = log_weights(N4), log_weights(M4)
OPT4 = optax.sgd(0.05, momentum=0.9)


def ot_loss_ref(x, y, la, lb):
    Cm = sqdist(x, y)
    f, g = jnp.zeros(x.shape[0]), jnp.zeros(y.shape[0])
    for _ in range(IT4):
        f = -EPS4 * lse((g[None, :] - Cm) / EPS4 + lb[None, :], axis=1)
        g = -EPS4 * lse((f[:, None] - Cm) / EPS4 + la[:, None], axis=0)
    Pm = jnp.exp((f[:, None] + g[None, :] - Cm) / EPS4 + la[:, None] + lb[None, :])
    return jnp.sum(Pm * Cm)


def two_steps_ref(x, y, la, lb):
    st, losses = OPT4.init(x), []
    for _ in range(2):
        loss, gx = jax.value_and_grad(ot_loss_ref)(x, y, la, lb)
        upd, st = OPT4.update(gx, st, x)
        x = optax.apply_updates(x, upd)
        losses.append(loss)
    return x, jnp.stack(losses)


def ot_two_steps(bug):
    def loss_fn(xl, y, la, lb):
        Cl = sqdist(xl, y)
        f, g = jnp.zeros(xl.shape[0]), jnp.zeros(y.shape[0])
        for _ in range(IT4):
            f = -EPS4 * lse((g[None, :] - Cl) / EPS4 + lb[None, :], axis=1)
            z = (f[:, None] - Cl) / EPS4 + la[:, None]
            if bug == "g-lse-local-shard":
                g = -EPS4 * lse(z, axis=0)
            else:
                mx = pmax(lax.stop_gradient(jnp.max(z, 0)), "dp")
                g = -EPS4 * (mx + jnp.log(psum(jnp.sum(jnp.exp(z - mx), 0), "dp")))
        Pl = jnp.exp((f[:, None] + g[None, :] - Cl) / EPS4 + la[:, None] + lb[None, :])
        part = jnp.sum(Pl * Cl)
        return pmean(part, "dp") if bug == "loss-pmean" else psum(part, "dp")

    def body(xl, y, la, lb):
        st, losses = OPT4.init(xl), []
        for _ in range(2):
            loss, gx = jax.value_and_grad(loss_fn)(xl, y, la, lb)
            upd, st = OPT4.update(gx, st, xl)
            xl = optax.apply_updates(xl, upd)
            losses.append(loss)
        return xl, jnp.stack(losses)
    return body


C.smap("s.entropic_ot_loss_grad_sgd2.dp4", {"dp": 4}, ot_two_steps, (P("dp"), P(), P("dp"), P()),
       (P("dp"), P()), two_steps_ref, (X4, Y4, LA4, LB4), check_vma=True,
       bugs=[("g-lse-local-shard", ["missing-all-reduce"]), ("loss-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. unbiased MMD^2, both sets over dp4, all_gather'd.
N5, D5, LS5 = 16, 3, 1.2
X5, Y5 = R(N5, D5), R(N5, D5) * 1.3 + 0.4


def mmd_ref(x, y):
    n, m = x.shape[0], y.shape[0]
    kxx, kyy, kxy = rbf(x, x, LS5), rbf(y, y, LS5), rbf(x, y, LS5)
    sxx = (jnp.sum(kxx) - jnp.trace(kxx)) / (n * (n - 1))
    syy = (jnp.sum(kyy) - jnp.trace(kyy)) / (m * (m - 1))
    return sxx + syy - 2.0 * jnp.sum(kxy) / (n * m)


def mmd_sharded(bug):
    def body(xl, yl):
        xa = lax.all_gather(xl, "dp", tiled=True)
        ya = lax.all_gather(yl, "dp", tiled=True)
        n, m, nl, ml = xa.shape[0], ya.shape[0], xl.shape[0], yl.shape[0]
        rx = jnp.arange(nl) if bug == "diag-local-index" else idx("dp") * nl + jnp.arange(nl)
        ry = jnp.arange(ml) if bug == "diag-local-index" else idx("dp") * ml + jnp.arange(ml)
        offx = rx[:, None] != jnp.arange(n)[None, :]
        offy = ry[:, None] != jnp.arange(m)[None, :]
        sxx = jnp.sum(jnp.where(offx, rbf(xl, xa, LS5), 0.0))
        syy = jnp.sum(jnp.where(offy, rbf(yl, ya, LS5), 0.0))
        sxy = jnp.sum(rbf(xl, ya, LS5))
        if bug == "cross-term-twice":
            sxy = sxy + jnp.sum(rbf(yl, xa, LS5))
        sxx, syy, sxy = psum((sxx, syy, sxy), "dp")
        return sxx / (n * (n - 1)) + syy / (m * (m - 1)) - 2.0 * sxy / (n * m)
    return body


C.smap("s.mmd_unbiased_two_sharded_sets.dp4", {"dp": 4}, mmd_sharded, (P("dp"), P("dp")), P(), mmd_ref, (X5, Y5),
       bugs=[("cross-term-twice", ["wrong-scale"]), ("diag-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. weighted kernel mean embeddings and witness, samples over dp8.
NP6, NQ6, NZ6, D6 = 32, 24, 10, 2
XP6, XQ6, Z6 = R(NP6, D6), R(NQ6, D6) + 0.7, R(NZ6, D6) * 1.5
WP6, WQ6 = rng.uniform(0.2, 1.0, NP6).astype(np.float32), rng.uniform(0.2, 1.0, NQ6).astype(np.float32)


def witness_ref(xp, wp, xq, wq, z):
    mu_p = jnp.einsum("i,iz->z", wp, rbf(xp, z, 0.8)) / jnp.sum(wp)
    mu_q = jnp.einsum("i,iz->z", wq, rbf(xq, z, 0.8)) / jnp.sum(wq)
    return mu_p, mu_q, mu_p - mu_q


def witness_sharded(bug):
    def mean_emb(x, w, z):
        num = jnp.einsum("i,iz->z", w, rbf(x, z, 0.8))
        if bug == "num-pmean":
            num = pmean(num, "dp")
        elif bug != "kernel-mean-no-psum":
            num = psum(num, "dp")
        return num / psum(jnp.sum(w), "dp")

    def body(xp, wp, xq, wq, z):
        mu_p, mu_q = mean_emb(xp, wp, z), mean_emb(xq, wq, z)
        return mu_p, mu_q, mu_p - mu_q
    return body


C.smap("s.kernel_mean_embedding_witness.dp8", {"dp": 8}, witness_sharded, (P("dp"), P("dp"), P("dp"), P("dp"), P()),
       (P(), P(), P()), witness_ref, (XP6, WP6, XQ6, WQ6, Z6),
       bugs=[("kernel-mean-no-psum", ["missing-all-reduce"]), ("num-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. kernel ridge regression by conjugate gradients, Gram rows over dp4.
N7, D7, T7, LAM7, IT7 = 32, 3, 8, 0.5, 5
X7, XT7 = R(N7, D7), R(T7, D7)
Y7 = (np.sin(X7[:, 0]) + 0.5 * X7[:, 1] + 0.1 * R(N7)).astype(np.float32)


def krr_cg_ref(x, y, xt):
    K = rbf(x, x, 1.5) + LAM7 * jnp.eye(x.shape[0])

    def it(_, s):
        a, r, p, rs = s
        Ap = K @ p
        al = rs / jnp.dot(p, Ap)
        a, r = a + al * p, r - al * Ap
        rn = jnp.dot(r, r)
        return a, r, r + (rn / rs) * p, rn
    a, *_ = lax.fori_loop(0, IT7, it, (jnp.zeros_like(y), y, y, jnp.dot(y, y)))
    return a, rbf(xt, x, 1.5) @ a


def krr_cg(bug):
    def body(xl, yl, xt):
        xa = lax.all_gather(xl, "dp", tiled=True)
        nl, n = xl.shape[0], xa.shape[0]
        rows = jnp.arange(nl) if bug == "ridge-local-row-index" else idx("dp") * nl + jnp.arange(nl)
        Kl = rbf(xl, xa, 1.5) + LAM7 * (rows[:, None] == jnp.arange(n)[None, :]).astype(jnp.float32)
        dot = lambda u, v: psum(jnp.vdot(u, v), "dp")

        def it(_, s):
            a, r, p, rs = s
            Ap = Kl @ lax.all_gather(p, "dp", tiled=True)
            al = rs / dot(p, Ap)
            a, r = a + al * p, r - al * Ap
            rn = dot(r, r)
            return a, r, r + (rn / rs) * p, rn
        a, *_ = lax.fori_loop(0, IT7, it, (jnp.zeros_like(yl), yl, yl, dot(yl, yl)))
        pred = rbf(xt, xl, 1.5) @ a
        return a, (pred if bug == "pred-no-psum" else psum(pred, "dp"))
    return body


C.smap("s.krr_conjugate_gradient_gram_rows.dp4", {"dp": 4}, krr_cg, (P("dp"), P("dp"), P()), (P("dp"), P()),
       krr_cg_ref, (X7, Y7, XT7),
       bugs=[("ridge-local-row-index", ["wrong-offset"]), ("pred-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. Performer FAVOR+ non-causal attention, sequence over sp4.
B8, T8, H8, E8, M8 = 2, 16, 2, 8, 16
Q8, K8, V8 = R(B8, T8, H8, E8, scale=0.6), R(B8, T8, H8, E8, scale=0.6), R(B8, T8, H8, E8)
W8 = R(M8, E8)


def favor_proj(x, w):
    x = x * E8 ** -0.25
    return jnp.einsum("bthe,me->bthm", x, w), 0.5 * jnp.sum(x * x, -1, keepdims=True)


def performer_ref(q, k, v, w):
    pq, nq = favor_proj(q, w)
    pk, nk = favor_proj(k, w)
    qf = jnp.exp(pq - nq - jnp.max(pq, -1, keepdims=True)) / np.sqrt(M8)
    kf = jnp.exp(pk - nk - jnp.max(pk, (1, 3), keepdims=True)) / np.sqrt(M8)
    kv = jnp.einsum("bthm,bthe->bhme", kf, v)
    den = jnp.einsum("bthm,bhm->bth", qf, kf.sum(1))
    return jnp.einsum("bthm,bhme->bthe", qf, kv) / den[..., None]


def performer_sp(bug):
    def body(q, k, v, w):
        pq, nq = favor_proj(q, w)
        pk, nk = favor_proj(k, w)
        qf = jnp.exp(pq - nq - jnp.max(pq, -1, keepdims=True)) / np.sqrt(M8)
        kmax = jnp.max(pk, (1, 3), keepdims=True)
        if bug != "key-stabiliser-local-max":
            kmax = pmax(kmax, "sp")
        kf = jnp.exp(pk - nk - kmax) / np.sqrt(M8)
        kv = psum(jnp.einsum("bthm,bthe->bhme", kf, v), "sp")
        ks = kf.sum(1)
        if bug != "normaliser-no-psum":
            ks = psum(ks, "sp")
        den = jnp.einsum("bthm,bhm->bth", qf, ks)
        return jnp.einsum("bthm,bhme->bthe", qf, kv) / den[..., None]
    return body


SP8 = P(None, "sp")
C.smap("s.performer_favor_noncausal_seq.sp4", {"sp": 4}, performer_sp, (SP8, SP8, SP8, P()), SP8,
       performer_ref, (Q8, K8, V8, W8),
       bugs=[("normaliser-no-psum", ["missing-all-reduce"]), ("key-stabiliser-local-max", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. Performer with the random features split over tp (dp2 x tp4).
B9, T9, H9, E9, M9 = 4, 8, 2, 8, 16
Q9, K9, V9 = R(B9, T9, H9, E9, scale=0.4), R(B9, T9, H9, E9, scale=0.4), R(B9, T9, H9, E9)
W9 = R(M9, E9, scale=0.7)


def pos_feat(x, w):
    return jnp.exp(jnp.einsum("bthe,me->bthm", x, w) - 0.5 * jnp.sum(x * x, -1, keepdims=True))


def performer_tp_ref(q, k, v, w):
    qf, kf = pos_feat(q, w), pos_feat(k, w)
    num = jnp.einsum("bthm,bshm,bshe->bthe", qf, kf, v)
    den = jnp.einsum("bthm,bshm->bth", qf, kf)
    return num / den[..., None]


def performer_tp(bug):
    def body(q, k, v, w):
        ml = M9 // 4
        shard = idx("dp") if bug == "feature-offset-dp-index" else idx("tp")
        wl = lax.dynamic_slice_in_dim(w, shard * ml, ml, axis=0)
        qf, kf = pos_feat(q, wl), pos_feat(k, wl)
        num = psum(jnp.einsum("bthm,bshm,bshe->bthe", qf, kf, v), "tp")
        den = jnp.einsum("bthm,bshm->bth", qf, kf)
        if bug != "normaliser-no-psum":
            den = psum(den, "tp")
        return num / den[..., None]
    return body


C.smap("s.performer_features_split_tp.dp2xtp4", {"dp": 2, "tp": 4}, performer_tp, (P("dp"), P("dp"), P("dp"), P()),
       P("dp"), performer_tp_ref, (Q9, K9, V9, W9),
       bugs=[("feature-offset-dp-index", ["wrong-offset"]), ("normaliser-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. causal Performer with ReLU features, sequence over sp4.
B10, T10, H10, E10, M10 = 1, 16, 2, 8, 12
Q10, K10, V10, W10 = R(B10, T10, H10, E10), R(B10, T10, H10, E10), R(B10, T10, H10, E10), R(M10, E10)


def relu_feat(x, w):
    return jax.nn.relu(jnp.einsum("bthe,me->bthm", x, w)) / np.sqrt(M10) + 1e-3


def causal_performer_ref(q, k, v, w):
    qf, kf = relu_feat(q, w), relu_feat(k, w)
    S = jnp.cumsum(jnp.einsum("bthm,bthe->bthme", kf, v), 1)
    z = jnp.cumsum(kf, 1)
    return jnp.einsum("bthm,bthme->bthe", qf, S) / jnp.einsum("bthm,bthm->bth", qf, z)[..., None]


def causal_performer_sp(bug):
    def body(q, k, v, w):
        qf, kf = relu_feat(q, w), relu_feat(k, w)
        S = jnp.cumsum(jnp.einsum("bthm,bthe->bthme", kf, v), 1)
        z = jnp.cumsum(kf, 1)
        if bug != "no-prefix":
            St = lax.all_gather(S[:, -1], "sp")  # (n, b, h, m, e)
            zt = lax.all_gather(z[:, -1], "sp")
            j = jnp.arange(4)
            before = (j <= idx("sp")) if bug == "inclusive-prefix" else (j < idx("sp"))
            S = S + jnp.einsum("n,nbhme->bhme", before.astype(S.dtype), St)[:, None]
            z = z + jnp.einsum("n,nbhm->bhm", before.astype(z.dtype), zt)[:, None]
        return jnp.einsum("bthm,bthme->bthe", qf, S) / jnp.einsum("bthm,bthm->bth", qf, z)[..., None]
    return body


SP10 = P(None, "sp")
C.smap("s.performer_relu_causal_prefix.sp4", {"sp": 4}, causal_performer_sp, (SP10, SP10, SP10, P()), SP10,
       causal_performer_ref, (Q10, K10, V10, W10),
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("no-prefix", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. Nystrom kernel ridge regression, rows over dp8, landmarks replicated.
N11, D11, L11, T11, LAM11 = 32, 3, 8, 6, 0.5
X11, Z11, XT11 = R(N11, D11), R(L11, D11), R(T11, D11)
Y11 = (np.cos(X11[:, 0]) - 0.3 * X11[:, 2]).astype(np.float32)


def inv_sqrt_psd(Wm):
    ev, V = jnp.linalg.eigh(Wm)
    return (V / jnp.sqrt(jnp.maximum(ev, 1e-4))) @ V.T


def nystrom_ref(x, y, z, xt):
    Cm, Wm = rbf(x, z, 1.3), rbf(z, z, 1.3)
    A = Cm.T @ Cm + LAM11 * Wm + 1e-3 * jnp.eye(z.shape[0])
    beta = jnp.linalg.solve(A, Cm.T @ y)
    return beta, rbf(xt, z, 1.3) @ beta, Cm @ inv_sqrt_psd(Wm)


def nystrom_dp(bug):
    def body(xl, yl, z, xt):
        Cl, Wm = rbf(xl, z, 1.3), rbf(z, z, 1.3)
        if bug == "ridge-added-per-shard":
            A = psum(Cl.T @ Cl + LAM11 * Wm, "dp")
        else:
            A = psum(Cl.T @ Cl, "dp") + LAM11 * Wm
        A = A + 1e-3 * jnp.eye(z.shape[0])
        cty = Cl.T @ yl if bug == "cty-no-psum" else psum(Cl.T @ yl, "dp")
        beta = jnp.linalg.solve(A, cty)
        return beta, rbf(xt, z, 1.3) @ beta, Cl @ inv_sqrt_psd(Wm)
    return body


C.smap("s.nystrom_ridge_landmarks.dp8", {"dp": 8}, nystrom_dp, (P("dp"), P("dp"), P(), P()), (P(), P(), P("dp")),
       nystrom_ref, (X11, Y11, Z11, XT11),
       bugs=[("ridge-added-per-shard", ["wrong-scale"]), ("cty-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 12. pairwise distances, nearest neighbours and Chamfer, both sets over dp4.
N12, M12, D12 = 16, 12, 3
X12, Y12 = R(N12, D12), R(M12, D12) * 0.8 + 0.2


def chamfer_ref(x, y):
    D = jnp.sum(x * x, 1)[:, None] + jnp.sum(y * y, 1)[None, :] - 2.0 * jnp.einsum("nd,md->nm", x, y)
    return jnp.argmin(D, 1).astype(jnp.int32), jnp.mean(jnp.min(D, 1)) + jnp.mean(jnp.min(D, 0))


def chamfer_dp(bug):
    def body(xl, yl):
        ya = lax.all_gather(yl, "dp", tiled=True)
        yy = jnp.tile(jnp.sum(yl * yl, 1), 4) if bug == "ynorm-local-tiled" else jnp.sum(ya * ya, 1)
        D = jnp.sum(xl * xl, 1)[:, None] + yy[None, :] - 2.0 * jnp.einsum("nd,md->nm", xl, ya)
        n = psum(xl.shape[0], "dp")
        colmin = jnp.min(D, 0)
        if bug != "y-side-local-min":
            colmin = pmin(colmin, "dp")
        return jnp.argmin(D, 1).astype(jnp.int32), psum(jnp.sum(jnp.min(D, 1)), "dp") / n + jnp.mean(colmin)
    return body


C.smap("s.chamfer_nn_allgather_other_set.dp4", {"dp": 4}, chamfer_dp, (P("dp"), P("dp")), (P("dp"), P()),
       chamfer_ref, (X12, Y12),
       bugs=[("y-side-local-min", ["missing-all-reduce"]), ("ynorm-local-tiled", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 13. nearest neighbours by a ring: y blocks ppermute'd around dp4 (no
#     all_gather), running min and argmin with the owner's offset.
N13r, M13r = 16, 16
X13r, Y13r = R(N13r, 3), R(M13r, 3) + 0.2


def nn_ref(x, y):
    D = jnp.sum((x[:, None, :] - y[None, :, :]) ** 2, -1)
    return jnp.min(D, 1), jnp.argmin(D, 1).astype(jnp.int32)


def nn_ring(bug):
    def body(xl, yl):
        n, ml, me = 4, yl.shape[0], idx("dp")
        perm = [(i, (i + 1) % n) for i in range(n)]
        best = jnp.full((xl.shape[0],), jnp.inf, xl.dtype)
        arg = jnp.zeros((xl.shape[0],), jnp.int32)
        blk = yl
        steps = n - 1 if bug == "ring-one-step-short" else n
        for s in range(steps):
            owner = (me + s) % n if bug == "owner-wrong-direction" else (me - s) % n
            D = jnp.sum((xl[:, None, :] - blk[None, :, :]) ** 2, -1)
            dmin, darg = jnp.min(D, 1), jnp.argmin(D, 1).astype(jnp.int32) + owner * ml
            take = dmin < best
            best, arg = jnp.where(take, dmin, best), jnp.where(take, darg, arg)
            blk = lax.ppermute(blk, "dp", perm)
        return best, arg
    return body


C.smap("s.nearest_neighbour_ring_ppermute.dp4", {"dp": 4}, nn_ring, (P("dp"), P("dp")), (P("dp"), P("dp")),
       nn_ref, (X13r, Y13r),
       bugs=[("ring-one-step-short", ["missing-collective"]), ("owner-wrong-direction", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 14. unbiased MMD^2 with the diagonal removed as the trace of the local
#     diagonal block (dynamic_slice at the row offset), dp8, bf16 inputs
#     upcast to f32.
X14, Y14 = R(16, 3, dt=jnp.bfloat16), (R(16, 3) + 0.5).astype(jnp.bfloat16)


def mmd_bf16_ref(x, y):
    return mmd_ref(x.astype(jnp.float32), y.astype(jnp.float32))


def mmd_trace(bug):
    def part(al, aa):
        nl = al.shape[0]
        K = rbf(al, aa, LS5)
        shard = (idx("dp") + 1) % 8 if bug == "diag-block-next-shard" else idx("dp")
        blockd = jnp.trace(lax.dynamic_slice_in_dim(K, shard * nl, nl, axis=1))
        return jnp.sum(K) - blockd

    def body(xl, yl):
        xl, yl = xl.astype(jnp.float32), yl.astype(jnp.float32)
        xa, ya = lax.all_gather(xl, "dp", tiled=True), lax.all_gather(yl, "dp", tiled=True)
        n, m = xa.shape[0], ya.shape[0]
        sxx = psum(part(xl, xa), "dp") / (n * (n - 1))
        syy = psum(part(yl, ya), "dp") / (m * (m - 1))
        kxy = rbf(xl, ya, LS5)
        sxy = psum(jnp.sum(kxy), "dp") / (n * m)
        if bug == "cross-term-twice":
            sxy = sxy + psum(jnp.sum(rbf(yl, xa, LS5)), "dp") / (n * m)
        return sxx + syy - 2.0 * sxy
    return body


C.smap("s.mmd_trace_of_diag_block_bf16.dp8", {"dp": 8}, mmd_trace, (P("dp"), P("dp")), P(), mmd_bf16_ref, (X14, Y14),
       bugs=[("diag-block-next-shard", ["wrong-offset"]), ("cross-term-twice", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. kernel ridge by 6 Richardson steps with the Gram matrix's COLUMNS over
#     dp4: K alpha as a psum_scatter of the local column block times the
#     local alpha.
N15, LAM15, ETA15 = 16, 0.5, 0.15
X15 = R(N15, 2)
Y15 = np.sin(X15[:, 0] * 1.5).astype(np.float32)


def richardson_ref(x, y):
    K = rbf(x, x, 1.0) + LAM15 * jnp.eye(x.shape[0])
    a = jnp.zeros_like(y)
    for _ in range(6):
        a = a - ETA15 * (K @ a - y)
    return a


def richardson_cols(bug):
    def body(xl, yl):
        xa = lax.all_gather(xl, "dp", tiled=True)
        Kc = rbf(xa, xl, 1.0)  # (n, n_loc): the local column block
        a = jnp.zeros_like(yl)
        for _ in range(6):
            full = Kc @ a
            if bug == "scatter-block-next-shard":
                Ka = lax.dynamic_slice_in_dim(psum(full, "dp"), ((idx("dp") + 1) % 4) * a.shape[0], a.shape[0])
            else:
                Ka = lax.psum_scatter(full, "dp", scatter_dimension=0, tiled=True)
            if bug == "ridge-scaled-by-shards":
                Ka = Ka + 4 * LAM15 * a
            else:
                Ka = Ka + LAM15 * a
            a = a - ETA15 * (Ka - yl)
        return a
    return body


C.smap("s.krr_richardson_gram_cols_psum_scatter.dp4", {"dp": 4}, richardson_cols, (P("dp"), P("dp")), P("dp"),
       richardson_ref, (X15, Y15),
       bugs=[("scatter-block-next-shard", ["wrong-offset"]), ("ridge-scaled-by-shards", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
N13 = 16
C13, LA13, LB13 = cost_matrix(N13, 12), log_weights(N13), log_weights(12)
C.gspmd("g.sinkhorn_log_cost_rows.dp8", {"dp": 8}, (P("dp"), P("dp"), P()), (P("dp"), P(), P()),
        sinkhorn_log, (C13, LA13, LB13))

C.gspmd("g.mmd_unbiased.dp8", {"dp": 8}, (P("dp"), P("dp")), P(), mmd_ref, (R(16, 3), R(16, 3) + 0.3))

C.gspmd("g.performer_favor_seq.sp4", {"sp": 4}, (SP8, SP8, SP8, P()), SP8, performer_ref,
        (R(B8, T8, H8, E8, scale=0.6), R(B8, T8, H8, E8, scale=0.6), R(B8, T8, H8, E8), R(M8, E8)))

OPT16 = optax.adam(0.05)


def adam_two_steps(x, y, la, lb):
    st, losses = OPT16.init(x), []
    for _ in range(2):
        loss, gx = jax.value_and_grad(ot_loss_ref)(x, y, la, lb)
        upd, st = OPT16.update(gx, st, x)
        x = optax.apply_updates(x, upd)
        losses.append(loss)
    return x, jnp.stack(losses)


C.gspmd("g.entropic_ot_adam2.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("tp"), P("dp"), P("tp")), (P("dp"), P()),
        adam_two_steps, (R(N4, D4), R(16, D4) + 0.5, log_weights(N4), log_weights(16)))

C.gspmd("g.krr_conjugate_gradient.dp4", {"dp": 4}, (P("dp"), P("dp"), P()), (P("dp"), P()), krr_cg_ref,
        (R(N7, D7), R(N7), R(T7, D7)))

C.gspmd("g.nystrom_ridge.dp8", {"dp": 8}, (P("dp"), P("dp"), P(), P()), (P(), P(), P("dp")), nystrom_ref,
        (R(N11, D11), R(N11), R(L11, D11), R(T11, D11)))

C.gspmd("g.performer_relu_causal.sp4", {"sp": 4}, (SP10, SP10, SP10, P()), SP10, causal_performer_ref,
        (R(B10, T10, H10, E10), R(B10, T10, H10, E10), R(B10, T10, H10, E10), R(M10, E10)))

C.finish()
