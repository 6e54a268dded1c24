"""samples/fresh58: a 58th batch of programs as a user writes them, on the theme of geometric and point-cloud models under sharding in current JAX (nearest-neighbour distances by a ring of ppermutes, Chamfer distance with the other set all_gather'd, k-nearest-neighbour EdgeConv with lax.top_k, radius graphs with masks, E(n)-equivariant message passing, molecular-dynamics forces with a cutoff and the minimal image convention as -grad E, Kabsch alignment, quaternion algebra, farthest point sampling loops, PointNet with features over tp, a force-matching training step), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. nearest neighbour of every point of A in B, both sets over sp8, B's
    blocks passed round a ring of ppermutes in a lax.fori_loop; the best
    squared distance and its global index (source block * block + local
    argmin) carried. Bugs: the source block computed as (me + s) % n while
    the ring moves i -> i + 1, one ring step short (a block never seen).
 2. Chamfer distance of a batch of cloud pairs, clouds over dp2, points of
    both sets over sp4, each set all_gather'd for the other's term, the sums
    psum'd and divided by the global counts. Bugs: the second term not
    psum'd, divided by the local point count, the sums psum'd over
    (dp, sp) (mixing clouds).
 3. DGCNN EdgeConv: k = 4 nearest neighbours (self excluded) by lax.top_k
    of negated squared distances against the all_gather'd positions, the
    neighbours' features gathered by their global index, max over edges of
    relu((f_j - f_i) W1 + f_i W2); clouds over dp2, points over sp4. Bugs:
    neighbours' features read from the local block (index mod block), self
    excluded at the local index.
 4. radius graph: mean of (1 - d^2 / r^2) weighted neighbour features over
    the points within radius r (self excluded), then a linear layer; points
    over sp4, others all_gather'd. Bugs: self excluded at the local index,
    neighbour count from the local block only.
 5. an EGNN layer (Satorras et al.): edge messages from h_i, h_j and
    |x_i - x_j|^2, coordinate update x_i + 1/(N-1) sum_j (x_i - x_j)
    phi_x(m_ij), node update from the summed messages; nodes over sp4, h and
    x all_gather'd. Bugs: normalised by the local count 1/(n_local - 1),
    self excluded at the local index.
 6. soft-sphere molecular dynamics in a periodic box: pair energy
    eps (1 - r^2/rc^2)^2 inside the cutoff with minimal-image displacements,
    particles over sp8, blocks passed round a ring of ppermutes
    (lax.fori_loop); forces -2 grad of the block energy with the other
    block held fixed, energy psum'd. Bugs: forces without the factor 2,
    energy not psum'd, self pair excluded at the local index at every ring
    step.
 7. Kabsch alignment of P onto Q, points over sp4: centroids and the 3x3
    covariance psum'd, SVD replicated, the aligned P and the RMSD. Bugs:
    local centroids, covariance not psum'd, RMSD over the local count.
 8. quaternion algebra: per-cloud quaternions composed by the Hamilton
    product (q2 * q1), normalised, points rotated by the sandwich q v q*,
    centred on the cloud's centroid (pmean over sp) and scaled by the
    global RMS radius; clouds over dp2, points over sp4. Bugs: centroid
    pmean'd over (dp, sp), the composition order swapped, radius from the
    local points.
 9. farthest point sampling: K = 6 samples from 32 points over sp4 in a
    lax.fori_loop, each device's best (distance, local index) all_gather'd,
    the winner's point broadcast by a masked psum. Bugs: returned index
    without the winner's block offset, every device continues from its own
    local argmax.
10. PointNet: shared per-point MLP with the hidden features over tp4
    (column then row parallel, psum), global max pool over the points (pmax
    over sp2), replicated classifier head. Bugs: mean pool (pmean of local
    maxima), relu before the row-parallel psum.
11. a force-matching training step of a tiny radial-basis neural potential
    (energy = sum over atoms of an MLP of cutoff-weighted RBF sums, forces
    = -grad_x E, loss on energies and forces, jax.grad through it for the
    parameters), configurations over dp4, gradients pmean'd, optax SGD with
    momentum. Bugs: gradients not pmean'd, gradients psum'd.
12. Horn's quaternion alignment without LAPACK: the 4x4 key matrix from the
    psum'd cross-covariance, its top eigenvector by a shifted power
    iteration (lax.fori_loop), points rotated by the quaternion sandwich;
    points over sp4. Bugs: target centroid local, key matrix from the local
    covariance, mean squared deviation over N - 1.
13. pair forces by Newton's third law: the reactions -sum_i f_ij of the
    local particles on all (all_gather'd) particles psum_scatter'd back to
    their owners; configurations over dp2, particles over sp4. Bugs: psum
    then the first block taken, psum'd over dp before the scatter.
14. Vector Neurons: VN-linear maps with the input channels over tp4
    (psum'd), the VN-ReLU, invariant norms mean-pooled over points (sp2).
    Bugs: the direction map k not psum'd, pooled sum divided by the local
    count.
15. soft nearest-neighbour distance (-tau logsumexp(-d / tau)) in bf16
    inputs with f32 accumulation by an unrolled ring of ppermutes and an
    online log-sum-exp, distances by |a|^2 + |b|^2 - 2 a.b; dp2 x sp4.
    Bugs: one ring step short, running sum not rescaled.
16. periodic pair energy by a half ring (4 ppermute steps over sp8, each
    unordered block pair once, the opposite block at weight 1/2 from both
    ends). Bugs: the opposite block at full weight, the energy halved again.
GSPMD pairs (jax.jit with in/out shardings): 17. Chamfer loss of a
deformed cloud and its gradient (dp2 x sp4); 18. EdgeConv of 3. (dp2 x
sp4); 19. periodic soft-sphere energy and forces by jax.grad with
positions over sp8; 20. an EGNN two-layer training step with optax.adamw,
nodes over sp4; 21. quaternion-to-matrix rotation of a batch of clouds and
a GELU feature layer over tp (dp2 x tp4); 22. radius-graph pair energy and
forces = -grad E, positions over sp4; 23. three velocity-Verlet steps with
jnp.mod wrapping, positions and velocities over sp8.
(The three bugs of 7. (Kabsch) were known misses while the witness could not
execute the LAPACK SVD custom call; it does now. 12. is the same alignment.)
Numerics: every correct pair agrees with its single-device run at rounding
level (max_abs_diff at most 1e-5); every bug variant differs clearly (the
smallest: 2e-4 on a mean squared deviation of 7e-3, 12.'s N - 1 bug).
Run from the repository root: bash samples/gen/run_fresh58.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh58.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh58.py"
C = Corpus("samples/fresh58", SCRIPT, "samples/gen/run_fresh58.sh", sys.argv[1:])
rng, R, I = seeded(5858)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
BIG = 1e9


def sqd(a, b):
    """Squared distances (..., n, m) of a (..., n, 3) and b (..., m, 3)."""
    return jnp.sum(jnp.square(a[..., :, None, :] - b[..., None, :, :]), -1)


# ---------------------------------------------------------------------------
# 1. nearest neighbour by a ring of ppermutes (sp8)
NA, NB = 32, 24


def nn_ref(a, b):
    d = sqd(a, b)
    return jnp.min(d, 1), jnp.argmin(d, 1).astype(jnp.int32)


def nn_ring(bug):
    def f(a, b):
        n, mb = 8, b.shape[0]
        me = idx("sp")
        perm = [(i, (i + 1) % n) for i in range(n)]

        def step(s, c):
            blk, best, arg = c
            src = (me + s) % n if bug == "src-wrong-direction" else (me - s) % n
            d = sqd(a, blk)
            m, j = jnp.min(d, 1), jnp.argmin(d, 1).astype(jnp.int32) + src * mb
            better = m < best
            best, arg = jnp.where(better, m, best), jnp.where(better, j, arg)
            return lax.ppermute(blk, "sp", perm), best, arg
        steps = n - 1 if bug == "ring-one-short" else n
        init = (b, jnp.full((a.shape[0],), jnp.inf, a.dtype), jnp.zeros((a.shape[0],), jnp.int32))
        _, best, arg = lax.fori_loop(0, steps, step, init)
        return best, arg
    return f


C.smap("s.nn_distance_ring_ppermute.sp8", {"sp": 8}, nn_ring, (P("sp"), P("sp")), (P("sp"), P("sp")),
       nn_ref, (R(NA, 3), R(NB, 3)),
       bugs=[("src-wrong-direction", ["wrong-offset"]), ("ring-one-short", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. Chamfer distance, clouds over dp2, points over sp4


def chamfer(a, b):
    d = sqd(a, b)  # (c, n, m)
    return jnp.mean(jnp.min(d, 2), 1) + jnp.mean(jnp.min(d, 1), 1)


def chamfer_sp(bug):
    def f(a, b):
        na, nb = a.shape[1] * 4, b.shape[1] * 4
        ag = lax.all_gather(a, "sp", axis=1, tiled=True)
        bg = lax.all_gather(b, "sp", axis=1, tiled=True)
        t1 = jnp.sum(jnp.min(sqd(a, bg), 2), 1)
        t2 = jnp.sum(jnp.min(sqd(b, ag), 2), 1)
        axes = ("dp", "sp") if bug == "psum-over-dp-too" else "sp"
        t1 = psum(t1, axes)
        if bug != "second-term-not-psummed":
            t2 = psum(t2, axes)
        if bug == "local-count":
            na, nb = a.shape[1], b.shape[1]
        return t1 / na + t2 / nb
    return f


C.smap("s.chamfer_both_sets_gathered.dp2xsp4", {"dp": 2, "sp": 4}, chamfer_sp,
       (P("dp", "sp"), P("dp", "sp")), P("dp"), chamfer, (R(4, 16, 3), R(4, 24, 3)),
       bugs=[("second-term-not-psummed", ["missing-all-reduce"]), ("local-count", ["wrong-scale"]),
             ("psum-over-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. DGCNN EdgeConv with top_k, clouds over dp2, points over sp4
K3 = 4


def edgeconv(p, f, w1, w2):
    def one(p, f):
        d = sqd(p, p) + BIG * jnp.eye(p.shape[0])
        _, nb = lax.top_k(-d, K3)
        fj = f[nb]  # (n, k, F)
        e = jax.nn.relu(jnp.einsum("nkf,fg->nkg", fj - f[:, None], w1) + (f @ w2)[:, None])
        return jnp.max(e, 1)
    return jax.vmap(one)(p, f)


def edgeconv_sp(bug):
    def f(p, ft, w1, w2):
        tl = p.shape[1]
        me = idx("sp")
        pa = lax.all_gather(p, "sp", axis=1, tiled=True)
        fa = lax.all_gather(ft, "sp", axis=1, tiled=True)
        rows = jnp.arange(tl) if bug == "self-local-index" else me * tl + jnp.arange(tl)
        eye = (rows[:, None] == jnp.arange(pa.shape[1])[None, :]).astype(p.dtype)

        def one(pl, fl, pa, fa):
            d = sqd(pl, pa) + BIG * eye
            _, nb = lax.top_k(-d, K3)
            fj = fl[nb % tl] if bug == "features-from-local-block" else fa[nb]
            e = jax.nn.relu(jnp.einsum("nkf,fg->nkg", fj - fl[:, None], w1) + (fl @ w2)[:, None])
            return jnp.max(e, 1)
        return jax.vmap(one)(p, ft, pa, fa)
    return f


C.smap("s.edgeconv_knn_topk.dp2xsp4", {"dp": 2, "sp": 4}, edgeconv_sp,
       (P("dp", "sp"), P("dp", "sp"), P(), P()), P("dp", "sp"), edgeconv,
       (R(2, 32, 3), R(2, 32, 8), R(8, 16, scale=0.4), R(8, 16, scale=0.4)),
       bugs=[("features-from-local-block", ["wrong-offset"]), ("self-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. radius graph, mean aggregation with self excluded, points over sp4
R4 = 1.0


def radius_mean(x, h, w):
    d = sqd(x, x)
    ok = (d < R4 * R4) & ~jnp.eye(x.shape[0], dtype=bool)
    wt = jnp.where(ok, 1.0 - d / (R4 * R4), 0.0)
    cnt = jnp.sum(ok, 1, keepdims=True).astype(x.dtype)
    return (wt @ h) / jnp.maximum(cnt, 1.0) @ w


def radius_sp(bug):
    def f(x, h, w):
        tl = x.shape[0]
        me = idx("sp")
        xa = lax.all_gather(x, "sp", tiled=True)
        ha = lax.all_gather(h, "sp", tiled=True)
        rows = jnp.arange(tl) if bug == "self-local-index" else me * tl + jnp.arange(tl)
        d = sqd(x, xa)
        ok = (d < R4 * R4) & (rows[:, None] != jnp.arange(xa.shape[0])[None, :])
        wt = jnp.where(ok, 1.0 - d / (R4 * R4), 0.0)
        if bug == "count-local-block":
            dl = sqd(x, x)
            okl = (dl < R4 * R4) & ~jnp.eye(tl, dtype=bool)
            cnt = jnp.sum(okl, 1, keepdims=True).astype(x.dtype)
        else:
            cnt = jnp.sum(ok, 1, keepdims=True).astype(x.dtype)
        return jnp.dot(jnp.dot(wt, ha) / jnp.maximum(cnt, 1.0), w)
    return f


C.smap("s.radius_graph_mean_aggr.sp4", {"sp": 4}, radius_sp, (P("sp"), P("sp"), P()), P("sp"), radius_mean,
       (R(32, 3, scale=0.8), R(32, 8), R(8, 8, scale=0.4)),
       bugs=[("self-local-index", ["wrong-offset"]), ("count-local-block", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. EGNN layer, nodes over sp4
F5, M5 = 8, 16


def egnn_params():
    return {"wa": R(F5, M5, scale=0.3), "wb": R(F5, M5, scale=0.3), "wd": R(M5, scale=0.3), "be": R(M5, scale=0.1),
            "we": R(M5, M5, scale=0.3), "wx": R(M5, scale=0.1), "wh1": R(F5, M5, scale=0.3),
            "wh2": R(M5, M5, scale=0.3), "wh3": R(M5, F5, scale=0.3)}


def egnn_msgs(p, hi, hj, xi, xj, mask):
    d2 = sqd(xi, xj)
    pre = (hi @ p["wa"])[:, None] + (hj @ p["wb"])[None] + d2[..., None] * p["wd"] + p["be"]
    m = jax.nn.silu(jnp.einsum("ijm,mk->ijk", jax.nn.silu(pre), p["we"])) * mask[..., None]
    dx = jnp.einsum("ijk,k->ij", m, p["wx"])[..., None] * (xi[:, None] - xj[None])
    return jnp.sum(m, 1), jnp.sum(dx, 1)


def egnn_node(p, h, agg):
    return h + jax.nn.silu(h @ p["wh1"] + agg @ p["wh2"]) @ p["wh3"]


def egnn(p, h, x):
    n = h.shape[0]
    agg, dx = egnn_msgs(p, h, h, x, x, 1.0 - jnp.eye(n))
    return egnn_node(p, h, agg), x + dx / (n - 1)


def egnn_sp(bug):
    def f(p, h, x):
        tl = h.shape[0]
        me = idx("sp")
        ha = lax.all_gather(h, "sp", tiled=True)
        xa = lax.all_gather(x, "sp", tiled=True)
        n = ha.shape[0]
        rows = jnp.arange(tl) if bug == "self-local-index" else me * tl + jnp.arange(tl)
        mask = (rows[:, None] != jnp.arange(n)[None, :]).astype(h.dtype)
        agg, dx = egnn_msgs(p, h, ha, x, xa, mask)
        norm = (tl - 1) if bug == "local-normaliser" else (n - 1)
        return egnn_node(p, h, agg), x + dx / norm
    return f


PE = egnn_params()
SPE = jax.tree.map(lambda _: P(), PE)
C.smap("s.egnn_layer_nodes_gathered.sp4", {"sp": 4}, egnn_sp, (SPE, P("sp"), P("sp")), (P("sp"), P("sp")), egnn,
       (PE, R(16, F5), R(16, 3)),
       bugs=[("local-normaliser", ["wrong-scale"]), ("self-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 6. periodic soft-sphere MD, ring of ppermutes, forces = -grad E (sp8)
L6, RC6, EPS6 = 3.0, 1.1, 0.7


def mic(d):
    return d - L6 * jnp.round(d / L6)


def pair_v(r2):
    return jnp.where(r2 < RC6 * RC6, EPS6 * jnp.square(1.0 - r2 / (RC6 * RC6)), 0.0)


def md_energy(x):
    d = mic(x[:, None] - x[None])
    v = pair_v(jnp.sum(d * d, -1)) * (1.0 - jnp.eye(x.shape[0]))
    return 0.5 * jnp.sum(v)


def md_ref(x):
    e, g = jax.value_and_grad(md_energy)(x)
    return e, -g


def md_ring(bug):
    def f(x):
        n, tl = 8, x.shape[0]
        me = idx("sp")
        perm = [(i, (i + 1) % n) for i in range(n)]

        def blk_energy(xl, y, s):
            src = (me - s) % n
            if bug == "self-mask-every-step":
                same = jnp.arange(tl)[:, None] == jnp.arange(tl)[None, :]
            else:
                same = (me * tl + jnp.arange(tl))[:, None] == (src * tl + jnp.arange(tl))[None, :]
            d = mic(xl[:, None] - y[None])
            return 0.5 * jnp.sum(jnp.where(same, 0.0, pair_v(jnp.sum(d * d, -1))))

        def step(s, c):
            y, e, frc = c
            eb, g = jax.value_and_grad(blk_energy)(x, y, s)
            scale = 1.0 if bug == "force-no-factor-2" else 2.0
            return lax.ppermute(y, "sp", perm), e + eb, frc - scale * g
        _, e, frc = lax.fori_loop(0, n, step, (x, jnp.zeros((), x.dtype), jnp.zeros_like(x)))
        return (e if bug == "energy-not-psummed" else psum(e, "sp")), frc
    return f


X6 = rng.uniform(0.0, L6, (32, 3)).astype(np.float32)
C.smap("s.md_softsphere_pbc_ring_forces.sp8", {"sp": 8}, md_ring, (P("sp"),), (P(), P("sp")), md_ref, (X6,),
       bugs=[("force-no-factor-2", ["wrong-scale"]), ("energy-not-psummed", ["missing-all-reduce"]),
             ("self-mask-every-step", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. Kabsch alignment, points over sp4


def kabsch_rot(h):
    u, _, vt = jnp.linalg.svd(h)
    dsign = jnp.sign(jnp.linalg.det(vt.T @ u.T))
    return vt.T @ jnp.diag(jnp.array([1.0, 1.0, 1.0]).at[2].set(dsign)) @ u.T


def kabsch(p, q):
    cp, cq = jnp.mean(p, 0), jnp.mean(q, 0)
    r = kabsch_rot((p - cp).T @ (q - cq))
    al = (p - cp) @ r.T + cq
    return al, jnp.sqrt(jnp.mean(jnp.sum(jnp.square(al - q), -1)))


def kabsch_sp(bug):
    def f(p, q):
        n = p.shape[0] * 4
        if bug == "local-centroids":
            cp, cq = jnp.mean(p, 0), jnp.mean(q, 0)
        else:
            cp, cq = psum(jnp.sum(p, 0), "sp") / n, psum(jnp.sum(q, 0), "sp") / n
        h = jnp.einsum("ni,nj->ij", p - cp, q - cq)
        if bug != "cov-not-psummed":
            h = psum(h, "sp")
        r = kabsch_rot(h)
        al = (p - cp) @ r.T + cq
        ss = jnp.sum(jnp.square(al - q))
        msd = psum(ss, "sp") / (p.shape[0] if bug == "rmsd-local-count" else n)
        return al, jnp.sqrt(msd)
    return f


def rand_rot():
    a = rng.standard_normal((3, 3))
    qm, rm = np.linalg.qr(a)
    qm = qm * np.sign(np.diag(rm))
    if np.linalg.det(qm) < 0:
        qm[:, 0] = -qm[:, 0]
    return qm.astype(np.float32)


P7 = R(32, 3) * np.array([2.0, 1.0, 0.5], np.float32)
Q7 = (P7 @ rand_rot().T + np.array([0.3, -1.0, 2.0], np.float32) + R(32, 3, scale=0.05)).astype(np.float32)
C.smap("s.kabsch_alignment_rmsd.sp4", {"sp": 4}, kabsch_sp, (P("sp"), P("sp")), (P("sp"), P()), kabsch,
       (P7, Q7),
       bugs=[("local-centroids", ["missing-all-reduce"]), ("cov-not-psummed", ["missing-all-reduce"]),
             ("rmsd-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. quaternion algebra, clouds over dp2, points over sp4


def qmul(a, b):
    aw, ax, ay, az = jnp.moveaxis(a, -1, 0)
    bw, bx, by, bz = jnp.moveaxis(b, -1, 0)
    return jnp.stack([aw * bw - ax * bx - ay * by - az * bz,
                      aw * bx + ax * bw + ay * bz - az * by,
                      aw * by - ax * bz + ay * bw + az * bx,
                      aw * bz + ax * by - ay * bx + az * bw], -1)


def qconj(q):
    return q * jnp.array([1.0, -1.0, -1.0, -1.0], q.dtype)


def qrotate(q, v):
    """Rotate v (c, n, 3) by unit quaternions q (c, 4): q v q*."""
    vq = jnp.concatenate([jnp.zeros(v.shape[:-1] + (1,), v.dtype), v], -1)
    qq = q[:, None]
    return qmul(qmul(qq, vq), qconj(qq))[..., 1:]


def quat_pose(q1, q2, pts):
    q = qmul(q2, q1)
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    y = qrotate(q, pts)
    y = y - jnp.mean(y, 1, keepdims=True)
    rad = jnp.sqrt(jnp.mean(jnp.sum(y * y, -1), 1))
    return y / rad[:, None, None]


def quat_sp(bug):
    def f(q1, q2, pts):
        q = qmul(q1, q2) if bug == "compose-order-swapped" else qmul(q2, q1)
        q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
        y = qrotate(q, pts)
        cax = ("dp", "sp") if bug == "centroid-over-dp-too" else "sp"
        y = y - pmean(jnp.mean(y, 1, keepdims=True), cax)
        ms = jnp.mean(jnp.sum(y * y, -1), 1)
        if bug != "radius-local":
            ms = pmean(ms, "sp")
        return y / jnp.sqrt(ms)[:, None, None]
    return f


PTS8 = R(4, 16, 3) + np.array([1.0, -2.0, 0.5], np.float32)
C.smap("s.quaternion_compose_rotate_normalise.dp2xsp4", {"dp": 2, "sp": 4}, quat_sp,
       (P("dp"), P("dp"), P("dp", "sp")), P("dp", "sp"), quat_pose, (R(4, 4), R(4, 4), PTS8),
       bugs=[("centroid-over-dp-too", ["wrong-axis"]), ("compose-order-swapped", ["wrong-order"]),
             ("radius-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. farthest point sampling, points over sp4
K9 = 6


def fps(x):
    def step(k, c):
        dist, sel, last = c
        dist = jnp.minimum(dist, jnp.sum(jnp.square(x - x[last]), -1))
        nxt = jnp.argmax(dist).astype(jnp.int32)
        return dist, sel.at[k].set(nxt), nxt
    init = (jnp.full((x.shape[0],), jnp.inf, x.dtype), jnp.zeros((K9,), jnp.int32), jnp.int32(0))
    _, sel, _ = lax.fori_loop(1, K9, step, init)
    return sel, x[sel]


def fps_sp(bug):
    def f(x):
        tl = x.shape[0]
        me = idx("sp")

        def pick(owner, li):
            return psum(jnp.where(me == owner, x[li], 0.0), "sp")

        def step(k, c):
            dist, sel, pts, lp = c
            dist = jnp.minimum(dist, jnp.sum(jnp.square(x - lp), -1))
            li = jnp.argmax(dist).astype(jnp.int32)
            vals = lax.all_gather(dist[li], "sp")
            lis = lax.all_gather(li, "sp")
            w = jnp.argmax(vals).astype(jnp.int32)
            gidx = lis[w] if bug == "index-without-offset" else w * tl + lis[w]
            nxt = x[li] if bug == "own-local-argmax" else pick(w, lis[w])
            return dist, sel.at[k].set(gidx), pts.at[k].set(nxt), nxt
        p0 = pick(0, 0)
        init = (jnp.full((tl,), jnp.inf, x.dtype), jnp.zeros((K9,), jnp.int32),
                jnp.zeros((K9, 3), x.dtype).at[0].set(p0), p0)
        _, sel, pts, _ = lax.fori_loop(1, K9, step, init)
        return sel, pts
    return f


C.smap("s.farthest_point_sampling_loop.sp4", {"sp": 4}, fps_sp, (P("sp"),), (P(), P()), fps, (R(32, 3),),
       bugs=[("index-without-offset", ["wrong-offset"]), ("own-local-argmax", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. PointNet, points over sp2, hidden features over tp4


def pointnet(x, w1, b1, w2, b2, w3):
    h = jax.nn.relu(jnp.einsum("cnd,dh->cnh", x, w1) + b1)
    g = jax.nn.relu(jnp.einsum("cnh,hk->cnk", h, w2) + b2)
    return jnp.max(g, 1) @ w3


def pointnet_tp(bug):
    def f(x, w1, b1, w2, b2, w3):
        h = jax.nn.relu(jnp.einsum("cnd,dh->cnh", x, w1) + b1)
        part = jnp.einsum("cnh,hk->cnk", h, w2)
        if bug == "relu-before-psum":
            g = psum(jax.nn.relu(part + b2 / 4), "tp")
        else:
            g = jax.nn.relu(psum(part, "tp") + b2)
        loc = jnp.max(g, 1)
        pooled = pmean(loc, "sp") if bug == "mean-of-local-maxima" else pmax(loc, "sp")
        return pooled @ w3
    return f


C.smap("s.pointnet_maxpool_feature_tp.sp2xtp4", {"sp": 2, "tp": 4}, pointnet_tp,
       (P(None, "sp"), P(None, "tp"), P("tp"), P("tp"), P(), P()), P(), pointnet,
       (R(3, 16, 3), R(3, 32, scale=0.5), R(32, scale=0.1), R(32, 16, scale=0.3), R(16, scale=0.1),
        R(16, 5, scale=0.3)),
       bugs=[("mean-of-local-maxima", ["wrong-collective-op"]), ("relu-before-psum", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 11. force matching of a radial-basis neural potential, configurations over dp4
NR, RC11 = 6, 2.0
MU11 = np.linspace(0.0, RC11, NR).astype(np.float32)


def nnp_energy(p, x):
    d = x[:, None] - x[None]
    r2 = jnp.sum(d * d, -1) + jnp.eye(x.shape[0])  # safe sqrt on the diagonal
    r = jnp.sqrt(r2)
    fc = jnp.where(r < RC11, 0.5 * (jnp.cos(np.pi * r / RC11) + 1.0), 0.0) * (1.0 - jnp.eye(x.shape[0]))
    g = jnp.exp(-4.0 * jnp.square(r[..., None] - MU11)) * fc[..., None]
    s = jnp.sum(g, 1)  # (atoms, NR)
    return jnp.sum(jnp.tanh(s @ p["w1"] + p["b1"]) @ p["w2"])


def fm_loss(p, xs, es, fs):
    def one(x, e, fr):
        en, g = jax.value_and_grad(nnp_energy, 1)(p, x)
        return jnp.square(en - e) + 0.1 * jnp.mean(jnp.square(-g - fr))
    return jnp.mean(jax.vmap(one)(xs, es, fs))


OPT11 = optax.sgd(0.05, momentum=0.9)
P11 = {"w1": R(NR, 8, scale=0.4), "b1": R(8, scale=0.1), "w2": R(8, scale=0.4)}
S11 = OPT11.init(P11)
SP11 = jax.tree.map(lambda _: P(), P11)
SS11 = state_specs(S11, SP11)


def fm_step(p, s, xs, es, fs):
    l, g = jax.value_and_grad(fm_loss)(p, xs, es, fs)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def fm_dp(bug):
    def f(p, s, xs, es, fs):
        l, g = jax.value_and_grad(fm_loss)(p, xs, es, fs)
        if bug == "grads-psummed":
            g = psum(g, "dp")
        elif bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


C.smap("s.force_matching_nnp_sgd.dp4", {"dp": 4}, fm_dp, (SP11, SS11, P("dp"), P("dp"), P("dp")),
       (SP11, SS11, P()), fm_step, (P11, S11, R(8, 5, 3, scale=0.8), R(8), R(8, 5, 3, scale=0.3)),
       bugs=[("grads-not-pmeaned", ["missing-all-reduce"]), ("grads-psummed", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 12. Horn's quaternion alignment (no LAPACK): the 4x4 key matrix built from
#     the psum'd 3x3 cross-covariance, its top eigenvector by a shifted power
#     iteration in a lax.fori_loop, points rotated by the quaternion
#     sandwich; points over sp4.


def horn_quat(s):
    sxx, sxy, sxz, syx, syy, syz, szx, szy, szz = [s[i, j] for i in range(3) for j in range(3)]
    nm = jnp.array([[sxx + syy + szz, syz - szy, szx - sxz, sxy - syx],
                    [syz - szy, sxx - syy - szz, sxy + syx, szx + sxz],
                    [szx - sxz, sxy + syx, -sxx + syy - szz, syz + szy],
                    [sxy - syx, szx + sxz, syz + szy, -sxx - syy + szz]])
    m = nm + jnp.sqrt(jnp.sum(nm * nm)) * jnp.eye(4)

    def it(_, v):
        w = m @ v
        return w / jnp.linalg.norm(w)
    return lax.fori_loop(0, 80, it, jnp.array([1.0, 0.1, 0.1, 0.1]) / np.sqrt(1.03))


def horn(p, q):
    cp, cq = jnp.mean(p, 0), jnp.mean(q, 0)
    qt = horn_quat(jnp.einsum("ni,nj->ij", p - cp, q - cq))
    al = qrotate(qt[None], (p - cp)[None])[0] + cq
    return al, jnp.mean(jnp.sum(jnp.square(al - q), -1))


def horn_sp(bug):
    def f(p, q):
        n = p.shape[0] * 4
        cp = pmean(jnp.mean(p, 0), "sp")
        cq = jnp.mean(q, 0) if bug == "target-centroid-local" else pmean(jnp.mean(q, 0), "sp")
        s = jnp.einsum("ni,nj->ij", p - cp, q - cq)
        if bug != "key-matrix-from-local-cov":
            s = psum(s, "sp")
        qt = horn_quat(s)
        al = qrotate(qt[None], (p - cp)[None])[0] + cq
        ss = psum(jnp.sum(jnp.square(al - q)), "sp")
        return al, ss / (n - 1 if bug == "msd-over-n-minus-1" else n)
    return f


C.smap("s.horn_quaternion_alignment_power_iter.sp4", {"sp": 4}, horn_sp, (P("sp"), P("sp")), (P("sp"), P()), horn,
       (P7, Q7),
       bugs=[("target-centroid-local", ["missing-all-reduce"]), ("key-matrix-from-local-cov", ["missing-all-reduce"]),
             ("msd-over-n-minus-1", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. pair forces with Newton's third law: configurations over dp2,
#     particles over sp4; each device computes the analytic pair forces
#     f_ij of its particles i against all (all_gather'd) j with the minimal
#     image and a cutoff; the reactions -sum_i f_ij on every particle are
#     psum_scatter'd back to their owners (so F_j = sum_i f_ji without
#     computing it twice).


def pair_force(xi, xj):
    """Analytic soft-sphere pair forces f_ij (force on i from j), (..., n, m, 3)."""
    d = mic(xi[..., :, None, :] - xj[..., None, :, :])
    r2 = jnp.sum(d * d, -1, keepdims=True)
    inside = r2 < RC6 * RC6
    mag = jnp.where(inside, 4.0 * EPS6 / (RC6 * RC6) * (1.0 - r2 / (RC6 * RC6)), 0.0)
    return mag * d


def forces_ref(x):
    return jnp.sum(pair_force(x, x), -2)


def newton3(bug):
    def f(x):
        xa = lax.all_gather(x, "sp", axis=1, tiled=True)
        fij = pair_force(x, xa)  # (c, tl, N, 3); self pairs have d = 0, so f_ii = 0
        react = -jnp.sum(fij, 1)  # (c, N, 3): force on every j from my i's
        if bug == "allreduce-take-first-block":
            return psum(react, "sp")[:, :x.shape[1]]
        if bug == "scatter-over-dp-too":
            return psum_scatter_sp(psum(react, "dp"))
        return psum_scatter_sp(react)
    return f


def psum_scatter_sp(a):
    return lax.psum_scatter(a, "sp", scatter_dimension=1, tiled=True)


C.smap("s.newton3_reaction_psum_scatter.dp2xsp4", {"dp": 2, "sp": 4}, newton3, (P("dp", "sp"),), P("dp", "sp"),
       forces_ref, (rng.uniform(0.0, L6, (2, 32, 3)).astype(np.float32),),
       bugs=[("allreduce-take-first-block", ["wrong-offset"]), ("scatter-over-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 14. Vector Neurons (rotation-equivariant 3-vector features): channels over
#     tp4, points over sp2; VN-linear maps q = V Wq, k = V Wk with the input
#     channels sharded (partial sums psum'd over tp), the VN-ReLU projecting
#     q off the direction k where <q, k> < 0, then invariant channel norms
#     mean-pooled over the points.


def vn_layer(v, wq, wk):
    q = jnp.einsum("cnid,io->cnod", v, wq)
    k = jnp.einsum("cnid,io->cnod", v, wk)
    dot = jnp.sum(q * k, -1, keepdims=True)
    kk = jnp.sum(k * k, -1, keepdims=True) + 1e-6
    out = jnp.where(dot >= 0, q, q - dot / kk * k)
    return jnp.mean(jnp.sqrt(jnp.sum(out * out, -1) + 1e-8), 1)


def vn_tp(bug):
    def f(v, wq, wk):
        q = psum(jnp.einsum("cnid,io->cnod", v, wq), "tp")
        k = jnp.einsum("cnid,io->cnod", v, wk)
        if bug != "direction-not-psummed":
            k = psum(k, "tp")
        dot = jnp.sum(q * k, -1, keepdims=True)
        kk = jnp.sum(k * k, -1, keepdims=True) + 1e-6
        out = jnp.where(dot >= 0, q, q - dot / kk * k)
        inv = jnp.sum(jnp.sqrt(jnp.sum(out * out, -1) + 1e-8), 1)
        if bug == "pool-sum-no-divide":
            return psum(inv, "sp") / v.shape[1]
        return psum(inv, "sp") / (v.shape[1] * 2)
    return f


C.smap("s.vector_neurons_relu_channels_tp.sp2xtp4", {"sp": 2, "tp": 4}, vn_tp,
       (P(None, "sp", "tp"), P("tp"), P("tp")), P(), vn_layer,
       (R(2, 8, 16, 3), R(16, 8, scale=0.3), R(16, 8, scale=0.3)),
       bugs=[("direction-not-psummed", ["missing-all-reduce"]), ("pool-sum-no-divide", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. soft nearest-neighbour (log-sum-exp of -d / tau) of every point of A
#     over all of B in bf16 inputs with f32 accumulation, clouds over dp2,
#     A and B over sp4; B's blocks visited by an unrolled ring of ppermutes
#     with an online (running max, rescaled sum) log-sum-exp; distances by
#     the expansion |a|^2 + |b|^2 - 2 a.b.
TAU = 0.5


def softnn(a, b):
    a32, b32 = a.astype(jnp.float32), b.astype(jnp.float32)
    d = (jnp.sum(a32 * a32, -1)[:, :, None] + jnp.sum(b32 * b32, -1)[:, None, :]
         - 2.0 * jnp.einsum("cnd,cmd->cnm", a, b, preferred_element_type=jnp.float32))
    return -TAU * jax.nn.logsumexp(-d / TAU, -1)


def softnn_ring(bug):
    def f(a, b):
        n = 4
        a32 = a.astype(jnp.float32)
        na = jnp.sum(a32 * a32, -1)[:, :, None]
        m = jnp.full(a.shape[:2], -jnp.inf, jnp.float32)
        s = jnp.zeros(a.shape[:2], jnp.float32)
        blk = b
        for step in range(n - 1 if bug == "ring-one-short" else n):
            b32 = blk.astype(jnp.float32)
            d = na + jnp.sum(b32 * b32, -1)[:, None, :] - 2.0 * jnp.einsum(
                "cnd,cmd->cnm", a, blk, preferred_element_type=jnp.float32)
            z = -d / TAU
            m_new = jnp.maximum(m, jnp.max(z, -1))
            old = s if bug == "sum-not-rescaled" else s * jnp.exp(m - m_new)
            s = old + jnp.sum(jnp.exp(z - m_new[..., None]), -1)
            m = m_new
            blk = lax.ppermute(blk, "sp", [(i, (i - 1) % n) for i in range(n)])
        return -TAU * (m + jnp.log(s))
    return f


C.smap("s.soft_nn_online_lse_ring_bf16.dp2xsp4", {"dp": 2, "sp": 4}, softnn_ring,
       (P("dp", "sp"), P("dp", "sp")), P("dp", "sp"), softnn,
       (R(2, 16, 3, dt=jnp.bfloat16), R(2, 16, 3, dt=jnp.bfloat16)),
       bugs=[("ring-one-short", ["missing-collective"]), ("sum-not-rescaled", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. pair energy by a half ring (each unordered block pair visited once):
#     particles over sp8, blocks moved by ppermute for 4 steps; the own
#     block at weight 1/2 (i != j), blocks 1..3 away at weight 1, the
#     opposite block (4 away, visited from both ends) at weight 1/2; the
#     energy psum'd. Periodic box and minimal image as in 6.


def md_energy_only(x):
    return md_energy(x)


def half_ring(bug):
    def f(x):
        n, tl = 8, x.shape[0]
        y, e = x, jnp.zeros((), jnp.float32)
        for s in range(n // 2 + 1):
            d = mic(x[:, None] - y[None])
            v = pair_v(jnp.sum(d * d, -1))
            if s == 0:
                v = v * (1.0 - jnp.eye(tl))
            w = 0.5 if s == 0 or (s == n // 2 and bug != "opposite-block-full-weight") else 1.0
            e = e + w * jnp.sum(v)
            if s < n // 2:
                y = lax.ppermute(y, "sp", [(i, (i + 1) % n) for i in range(n)])
        return psum(e, "sp") / (2.0 if bug == "halved-again" else 1.0)
    return f


C.smap("s.md_energy_half_ring_newton.sp8", {"sp": 8}, half_ring, (P("sp"),), P(), md_energy_only,
       (rng.uniform(0.0, L6, (32, 3)).astype(np.float32),),
       bugs=[("opposite-block-full-weight", ["wrong-scale"]), ("halved-again", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs

# 12. Chamfer loss of a deformed cloud (points + offsets) and its gradient
def chamfer_fit(off, a, b):
    return jax.value_and_grad(lambda o: jnp.mean(chamfer(a + o, b)))(off)


C.gspmd("g.chamfer_deform_grad.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp"), P("dp", "sp")),
        (P(), P("dp", "sp")), chamfer_fit, (R(4, 16, 3, scale=0.1), R(4, 16, 3), R(4, 24, 3)))

# 13. EdgeConv of 3.
C.gspmd("g.edgeconv_knn_topk.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp"), P(), P()),
        P("dp", "sp"), edgeconv, (R(2, 32, 3), R(2, 32, 8), R(8, 16, scale=0.4), R(8, 16, scale=0.4)))

# 14. periodic soft-sphere energy and forces
C.gspmd("g.md_softsphere_pbc_forces.sp8", {"sp": 8}, (P("sp"),), (P(), P("sp")), md_ref,
        (rng.uniform(0.0, L6, (32, 3)).astype(np.float32),))

# 15. EGNN training step (coordinates regressed), optax.adamw, nodes over sp4
OPT15 = optax.adamw(1e-2, weight_decay=1e-3)
S15 = OPT15.init(PE)
SS15 = state_specs(S15, SPE)


def egnn_step(p, s, h, x, xt):
    def loss(p):
        h1, x1 = egnn(p, h, x)
        h2, x2 = egnn(p, h1, x1)
        return jnp.mean(jnp.sum(jnp.square(x2 - xt), -1))
    l, g = jax.value_and_grad(loss)(p)
    u, s = OPT15.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.egnn_two_layer_adamw_step.sp4", {"sp": 4}, (SPE, SS15, P("sp"), P("sp"), P("sp")),
        (SPE, SS15, P()), egnn_step, (PE, S15, R(16, F5), R(16, 3), R(16, 3)))


# 16. quaternion -> rotation matrix, clouds rotated, then a feature layer over tp
def quat_to_mat(q):
    q = q / jnp.linalg.norm(q, axis=-1, keepdims=True)
    w, x, y, z = jnp.moveaxis(q, -1, 0)
    return jnp.stack([jnp.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
                      jnp.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
                      jnp.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1)], -2)


def rot_feat(q, pts, w):
    y = jnp.einsum("cij,cnj->cni", quat_to_mat(q), pts)
    return jax.nn.gelu(jnp.einsum("cni,ih->cnh", y, w))


C.gspmd("g.quat_matrix_rotate_feature_tp.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp"), P("dp"), P(None, "tp")),
        P("dp", None, "tp"), rot_feat, (R(4, 4), R(4, 16, 3), R(3, 32)))

# 17. radius-graph pair energy (no box) and forces = -grad E, positions over sp4
def rg_energy_forces(x):
    def e(x):
        d2 = sqd(x, x) + 4.0 * jnp.eye(x.shape[0])
        return 0.5 * jnp.sum(jnp.where(d2 < 1.0, jnp.square(1.0 - d2) * jnp.exp(-d2), 0.0))
    en, g = jax.value_and_grad(e)(x)
    return en, -g


C.gspmd("g.radius_graph_energy_forces.sp4", {"sp": 4}, (P("sp"),), (P(), P("sp")), rg_energy_forces,
        (R(32, 3, scale=0.7),))

# 18. three velocity-Verlet steps of the periodic soft-sphere system (forces
#     by jax.grad, positions wrapped back into the box by jnp.mod),
#     positions and velocities over sp8
def verlet(x, v, dt=0.01):
    def body(_, c):
        x, v = c
        f = -jax.grad(md_energy)(x)
        v = v + 0.5 * dt * f
        x = jnp.mod(x + dt * v, L6)
        f = -jax.grad(md_energy)(x)
        return x, v + 0.5 * dt * f
    return lax.fori_loop(0, 3, body, (x, v))


C.gspmd("g.md_velocity_verlet_pbc.sp8", {"sp": 8}, (P("sp"), P("sp")), (P("sp"), P("sp")), verlet,
        (rng.uniform(0.0, L6, (32, 3)).astype(np.float32), R(32, 3, scale=0.3)))

C.finish()
