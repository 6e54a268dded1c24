"""samples/fresh114: a 114th batch of programs as a user writes them, on the theme of point-cloud and geometric models as users write them in JAX (PointNet with global max / mean pools over points sharded across devices, the PointNet T-Net, PointNet++ farthest point sampling in a fori_loop, ball query by distance thresholds with global ranks, grouping by one-hot gathers and 3-NN feature propagation, DGCNN EdgeConv with k-nearest neighbours by top_k over all_gather'd candidates, Point Transformer vector attention over kNN neighbourhoods, Chamfer distances between point sets on different devices and their gradients, voxelisation by spatial hashing / segment_sum / segment_max, training steps with jax.grad and optax under dp and point sharding), none of them an idiom of samples/fresh .. fresh26, probe, train or wild (nor of fresh58, the earlier point-cloud batch: its ring nearest neighbours, all_gather'd-position EdgeConv, pmin-free FPS and tp PointNet are not repeated).
Sizes: clouds of N = 32 points in 3-D with 8 features, 2 clouds (4 in 9.);
"dp2 x sp4" is clouds over dp, points over sp.
shard_map families (bugs in brackets):
 1. farthest point sampling (6 samples, lax.fori_loop), dp2 x sp4: the best
    distance by pmax, the smallest global index among devices reaching it by
    pmin, the winner's coordinates by a masked psum. [index without the
    block offset; coordinates by a pmax of the masked values (wrong for
    negative coordinates)]
 2. PointNet++ ball query + grouping, points over sp4, 5 centroids
    replicated: first 4 points within the radius in point order, padded
    with the first found; global ranks from an exclusive prefix of the
    all_gather'd per-device counts, groups by a one-hot einsum psum'd,
    shared MLP and max over the group. [inclusive prefix; the padding
    decision from the local count; features not psum'd]
 3. DGCNN EdgeConv, k = 4 (self included), dp2 x sp4: every device ranks ALL
    queries against its own block by top_k, the candidates (scores, global
    ids, features) all_gather'd along the candidate axis and merged by a
    second top_k, own query rows kept by dynamic_slice. [ids without the
    offset; merge of the local candidates only; rows taken at offset 0]
 4. Point Transformer vector attention over 6 nearest neighbours, dp2 x sp4:
    k / v projected locally and all_gather'd with the positions, relative
    position MLP, attention MLP on q_i - k_j + delta, softmax over the
    neighbours per channel. [neighbours read from the local block (index mod
    block); query positions taken at offset 0]
 5. Chamfer distance between two clouds living on different devices, the
    stacked pair over pr2 x sp4: the other set by a swap over pr (ppermute)
    and an all_gather over sp, per-point nearest squared distances and the
    symmetric loss. [no swap (distance to itself); divided by the local
    count]
 6. Chamfer loss and its gradient for the predicted points, predicted and
    target clouds both over sp4, dp2: jax.value_and_grad through the
    all_gather of the predictions (its transpose returns the other devices'
    target terms), loss psum'd. [stop_gradient on the gathered predictions;
    gradient divided by the sp size]
 7. voxelisation by spatial hashing (uint32 multiply / xor, 16-slot table),
    points over sp8: slot sums and counts by segment_sum psum'd, slot means,
    each point's slot mean scattered back. [pmean of local means; counts not
    psum'd]
 8. PointPillars-style bird's-eye grid (4 x 4), dp2 x sp4: relu(f W) in bf16
    with f32 accumulation, per-cell segment_max, empty cells set to 0 BEFORE
    the pmax over sp (harmless: relu >= 0). [psum instead of pmax; pmax over
    (dp, sp), mixing clouds]
 9. PointNet classification step, dp2 x sp4: global max pool as a max over
    the all_gather'd local maxima (pmax has no derivative), the replicated
    loss divided by the sp size so the all_gather's transpose counts one
    copy, gradients psum'd over sp and pmean'd over dp, optax SGD with
    Nesterov momentum. [loss not divided by sp (4x gradients); pooled over
    the local points only]
10. PointNet T-Net: 3x3 transform from a pmax-pooled feature plus identity,
    points transformed, a second pmax pool, orthogonality regulariser
    pmean'd over (dp, sp) (replicated over sp, so that is the dp mean).
    [T-Net pooled locally; regulariser psum'd over dp]
11. PointNet++ feature propagation: 3-NN inverse squared-distance weights from
    a sparse level (16 points over sp4) to the replicated dense level, local
    top-3 candidates all_gather'd and merged, weights normalised after the
    merge, skip features, unit MLP; dp2. [weights normalised per device
    before the merge; merge of the local candidates only]
12. per-cloud voxel means (4 x 4 x 4 grid) with sums and counts packed into
    ONE pmean over sp (the ratio of pmeans is the ratio of psums), empty
    voxels guarded by where(count > 0); dp2 x sp4. [counts clamped at 1
    after the pmean (wrong for voxels with fewer than 4 points); pmean over
    (dp, sp)]
13. EdgeConv regression step, dp2 x sp4: kNN on all_gather'd positions,
    neighbour features from the all_gather'd features, loss on own rows,
    value_and_grad for the weight and the input features (the transpose of
    the all_gather brings the neighbours' cotangents home), weight gradient
    psum'd over (dp, sp). [stop_gradient on the gathered features; weight
    gradient psum'd over sp only]
14. farthest point sampling written the other way, one cloud over sp8: each
    device's (best distance, global index, coordinates) all_gather'd and the
    winner chosen by argmax over the device axis. [argmin over devices;
    index without the offset]
15. PointNet part-segmentation step with check_vma=True, dp2 x sp4: global
    MEAN pool by psum / N, per-point CE summed and psum'd over (dp, sp),
    jax.grad through the psum (replicated weights' gradients come back
    complete), optax SGD. [local mean pool; gradients psum'd again]
16. hashed voxel table sharded over its slots, points over sp8: sums and
    counts by .at[].add on the full table, psum_scatter'd (tiled) so each
    device owns 2 slots and divides there. [means taken before the
    reduce-scatter; counts psum'd and the first block taken]
GSPMD pairs (correct only): PointNet forward with a with_sharding_constraint
on the per-point features (dp2 x sp4); Chamfer value_and_grad (dp2 x sp4);
hashed voxel means (sp8); DGCNN EdgeConv kNN (dp2 x sp4); a PointNet AdamW
step (dp4); FPS fori_loop with points sharded (dp2 x sp4); ball query and
grouping MLP (sp4); Point Transformer attention (dp2 x sp4).
Numerics: every correct pair agrees with its baseline at rounding level
(at most 4e-6 on values up to 33, mostly 0); every bug variant differs
clearly (at least 0.02, most > 0.4). Nothing was dropped.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh114.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh114.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402

SCRIPT = "samples/gen/fresh114.py"
C = Corpus("samples/fresh114", SCRIPT, "samples/gen/run_fresh114.sh", sys.argv[1:])
rng, R, I = seeded(114114)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index
i32 = jnp.int32


def sqdist(a, b):
    """squared distances between a (..., n, 3) and b (..., m, 3) -> (..., n, m)."""
    return jnp.sum(jnp.square(a[..., :, None, :] - b[..., None, :, :]), -1)


def take_rows(x, nb):
    """x (b, n, c), nb (b, q, k) int -> (b, q, k, c)."""
    return jax.vmap(lambda xx, ii: xx[ii])(x, nb)


B, N, CF = 2, 32, 8
X = R(B, N, 3)
F = R(B, N, CF)

# ---------------------------------------------------------------------------
# 1. farthest point sampling, points over sp4, clouds over dp2: per step the
#    best distance by pmax, the smallest global index among the devices that
#    reach it by pmin, the winner's coordinates by a masked psum.
KS = 6


def fps_ref(x):
    def one(p):
        def step(i, c):
            ids, dist, last = c
            dist = jnp.minimum(dist, jnp.sum(jnp.square(p - p[last]), -1))
            nxt = jnp.argmax(dist).astype(i32)
            return ids.at[i].set(nxt), dist, nxt
        ids, _, _ = lax.fori_loop(1, KS, step, (jnp.zeros(KS, i32), jnp.full(p.shape[:1], jnp.inf), i32(0)))
        return ids, p[ids]
    return jax.vmap(one)(x)


def fps_sp(bug):
    def f(x):
        bl, nl, _ = x.shape
        me = idx("sp")
        off = me * nl
        first = psum(jnp.where(me == 0, x[:, 0], 0.0), "sp")

        def step(i, c):
            ids, dist, last = c
            dist = jnp.minimum(dist, jnp.sum(jnp.square(x - last[:, None]), -1))
            lbest, larg = jnp.max(dist, 1), jnp.argmax(dist, 1).astype(i32)
            gbest = pmax(lbest, "sp")
            if bug == "index-without-offset":
                gidx = pmin(jnp.where(lbest == gbest, larg, 1 << 30), "sp")
                mine = lbest == gbest
            else:
                gidx = pmin(jnp.where(lbest == gbest, larg + off, 1 << 30), "sp")
                mine = (gidx >= off) & (gidx < off + nl)
            loc = jnp.take_along_axis(x, jnp.clip(gidx - off, 0, nl - 1)[:, None, None], 1)[:, 0]
            if bug == "coords-by-pmax":
                pt = pmax(jnp.where(mine[:, None], loc, 0.0), "sp")
            else:
                pt = psum(jnp.where(mine[:, None], loc, 0.0), "sp")
            return ids.at[:, i].set(gidx), dist, pt
        ids, _, _ = lax.fori_loop(1, KS, step, (jnp.zeros((bl, KS), i32), jnp.full((bl, nl), jnp.inf), first))
        pts = jax.vmap(lambda a, b: a[b])(lax.all_gather(x, "sp", axis=1, tiled=True), ids)
        return ids, pts
    return f


C.smap("s.fps_pmax_pmin_tiebreak.dp2xsp4", {"dp": 2, "sp": 4}, fps_sp, (P("dp", "sp"),), (P("dp"), P("dp")),
       fps_ref, (X,), bugs=[("index-without-offset", ["wrong-offset"]), ("coords-by-pmax", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 2. PointNet++ ball query + grouping with the cloud's points over sp4 and the
#    centroids replicated: the first KB points within the radius in point
#    order (padding with the first one found), the global rank of a point
#    from an exclusive prefix of the all_gather'd per-device counts, the
#    group gathered by a one-hot einsum and psum'd; shared MLP, max over the
#    group.
KB, RAD, M2 = 4, 1.1, 5
CEN = X[:, [0, 5, 13, 22, 31]]
W2a, b2a, W2b = R(3 + CF, 16, scale=0.3), R(16, scale=0.1), R(16, 12, scale=0.3)


def group_mlp(gx, gf, w1, b1, w2):
    h = jax.nn.relu(jnp.concatenate([gx, gf], -1) @ w1 + b1)
    return jnp.max(h, 2) @ w2


def ballq_ref(x, f, c, w1, b1, w2):
    mask = sqdist(c, x) < RAD ** 2
    rank = jnp.cumsum(mask, -1) - 1
    total = jnp.sum(mask, -1)
    tgt = jnp.where(jnp.arange(KB)[None, None] < total[..., None], jnp.arange(KB), 0)
    sel = (mask[:, :, None] & (rank[:, :, None] == tgt[..., None])).astype(x.dtype)
    gx = jnp.einsum("bmkn,bnd->bmkd", sel, x) - c[:, :, None]
    gf = jnp.einsum("bmkn,bnc->bmkc", sel, f)
    return group_mlp(gx, gf, w1, b1, w2)


def ballq_sp(bug):
    def f(x, fe, c, w1, b1, w2):
        n, me = 4, idx("sp")
        mask = sqdist(c, x) < RAD ** 2
        cnt = jnp.sum(mask, -1)
        counts = lax.all_gather(cnt, "sp")
        if bug == "inclusive-prefix":
            before = jnp.sum(jnp.where((jnp.arange(n) <= me)[:, None, None], counts, 0), 0)
        else:
            before = jnp.sum(jnp.where((jnp.arange(n) < me)[:, None, None], counts, 0), 0)
        total = cnt if bug == "local-total" else jnp.sum(counts, 0)
        rank = jnp.cumsum(mask, -1) - 1 + before[..., None]
        tgt = jnp.where(jnp.arange(KB)[None, None] < total[..., None], jnp.arange(KB), 0)
        sel = (mask[:, :, None] & (rank[:, :, None] == tgt[..., None])).astype(x.dtype)
        gx = psum(jnp.einsum("bmkn,bnd->bmkd", sel, x), "sp") - c[:, :, None]
        gf = jnp.einsum("bmkn,bnc->bmkc", sel, fe)
        if bug != "features-not-psummed":
            gf = psum(gf, "sp")
        return group_mlp(gx, gf, w1, b1, w2)
    return f


C.smap("s.pn2_ballquery_rank_prefix.sp4", {"sp": 4}, ballq_sp, (P(None, "sp"), P(None, "sp"), P(), P(), P(), P()),
       P(), ballq_ref, (X, F, CEN, W2a, b2a, W2b),
       bugs=[("inclusive-prefix", ["wrong-offset"]), ("local-total", ["missing-all-reduce"]),
             ("features-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 3. DGCNN EdgeConv, kNN (self included) with the points over sp4 and clouds
#    over dp2: every device ranks ALL queries against its own block
#    (top_k), the candidates (scores, global ids, features) are all_gather'd
#    along the candidate axis and merged by a second top_k; each device keeps
#    its own query rows.
KN = 4
W3 = R(2 * CF, 12, scale=0.3)


def edge_feats(fi, fj, w):
    e = jnp.concatenate([jnp.broadcast_to(fi[:, :, None], fj.shape), fj - fi[:, :, None]], -1) @ w
    return jnp.max(jax.nn.leaky_relu(e, 0.2), 2)


def edgeconv_ref(x, f, w):
    _, nb = lax.top_k(-sqdist(x, x), KN)
    return edge_feats(f, take_rows(f, nb), w), nb.astype(i32)


def edgeconv_sp(bug):
    def f(x, fe, w):
        bl, nl, _ = x.shape
        off = idx("sp") * nl
        xa = lax.all_gather(x, "sp", axis=1, tiled=True)
        s, li = lax.top_k(-sqdist(xa, x), KN)                      # (bl, N, KN) local candidates
        gi = li.astype(i32) if bug == "ids-without-offset" else li.astype(i32) + off
        cf = take_rows(fe, li)
        if bug != "merge-local-only":
            s = lax.all_gather(s, "sp", axis=2, tiled=True)
            gi = lax.all_gather(gi, "sp", axis=2, tiled=True)
            cf = lax.all_gather(cf, "sp", axis=2, tiled=True)
        _, j = lax.top_k(s, KN)
        nb = jnp.take_along_axis(gi, j, 2)
        fj = jnp.take_along_axis(cf, j[..., None], 2)
        start = 0 if bug == "rows-at-zero" else off
        nb, fj = lax.dynamic_slice_in_dim(nb, start, nl, 1), lax.dynamic_slice_in_dim(fj, start, nl, 1)
        return edge_feats(fe, fj, w), nb
    return f


C.smap("s.dgcnn_knn_candidates_allgather_merge.dp2xsp4", {"dp": 2, "sp": 4}, edgeconv_sp,
       (P("dp", "sp"), P("dp", "sp"), P()), (P("dp", "sp"), P("dp", "sp")), edgeconv_ref, (X, F, W3),
       bugs=[("ids-without-offset", ["wrong-offset"]), ("merge-local-only", ["missing-collective"]),
             ("rows-at-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. Point Transformer vector attention over k = 6 nearest neighbours, points
#    over sp4 (clouds over dp2): keys and values projected locally and
#    all_gather'd with the positions; neighbours by top_k of the local
#    queries against all points; relative-position MLP delta, the attention
#    MLP gamma on q_i - k_j + delta, softmax over the neighbours per channel.
KP = 6
PT = dict(wq=R(CF, CF, scale=0.3), wk=R(CF, CF, scale=0.3), wv=R(CF, CF, scale=0.3),
          d1=R(3, 8, scale=0.5), d2=R(8, CF, scale=0.3), g1=R(CF, CF, scale=0.3), g2=R(CF, CF, scale=0.3))


def pt_attend(p, q, pi, kj, vj, pj):
    delta = jax.nn.relu((pi[:, :, None] - pj) @ p["d1"]) @ p["d2"]
    a = jax.nn.relu((q[:, :, None] - kj + delta) @ p["g1"]) @ p["g2"]
    w = jax.nn.softmax(a / np.sqrt(CF), axis=2)
    return jnp.sum(w * (vj + delta), 2)


def ptattn_ref(p, x, f):
    _, nb = lax.top_k(-sqdist(x, x), KP)
    q, k, v = f @ p["wq"], f @ p["wk"], f @ p["wv"]
    return pt_attend(p, q, x, take_rows(k, nb), take_rows(v, nb), take_rows(x, nb))


def ptattn_sp(bug):
    def f(p, x, fe):
        nl = x.shape[1]
        q, k, v = fe @ p["wq"], fe @ p["wk"], fe @ p["wv"]
        xa = lax.all_gather(x, "sp", axis=1, tiled=True)
        _, nb = lax.top_k(-sqdist(x, xa), KP)
        if bug == "neighbours-from-local-block":
            ka, va, pa, nb = k, v, x, nb % nl
        else:
            ka, va, pa = (lax.all_gather(t, "sp", axis=1, tiled=True) for t in (k, v, x))
        pi = lax.dynamic_slice_in_dim(xa, 0, nl, 1) if bug == "query-pos-at-zero" else x
        return pt_attend(p, q, pi, take_rows(ka, nb), take_rows(va, nb), take_rows(pa, nb))
    return f


C.smap("s.point_transformer_vector_attn_knn.dp2xsp4", {"dp": 2, "sp": 4}, ptattn_sp,
       (P(), P("dp", "sp"), P("dp", "sp")), P("dp", "sp"), ptattn_ref, (PT, X, F),
       bugs=[("neighbours-from-local-block", ["missing-collective"]), ("query-pos-at-zero", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. Chamfer distance between a predicted and a target cloud that live on
#    different devices: the stacked pair (2, N, 3) over pr2 (set) x sp4
#    (points); the other set arrives by a swap over pr and an all_gather
#    over sp; per-point nearest squared distances and the symmetric loss.
S5 = np.stack([R(N, 3), R(N, 3) * 0.8 + 0.2])


def chamfer_pair_ref(s):
    d = sqdist(s[0], s[1])
    da, db = jnp.min(d, 1), jnp.min(d, 0)
    return jnp.mean(da) + jnp.mean(db), jnp.stack([da, db])


def chamfer_pair_sp(bug):
    def f(s):
        nl = s.shape[1]
        other = s if bug == "no-swap" else lax.ppermute(s, "pr", [(0, 1), (1, 0)])
        other = lax.all_gather(other, "sp", axis=1, tiled=True)
        dmin = jnp.min(sqdist(s, other), -1)                       # (1, nl)
        part = jnp.sum(dmin) / (nl if bug == "local-count" else nl * 4)
        loss = psum(psum(part, "sp"), "pr")
        return loss, dmin
    return f


C.smap("s.chamfer_sets_on_different_devices.pr2xsp4", {"pr": 2, "sp": 4}, chamfer_pair_sp, (P("pr", "sp"),),
       (P(), P("pr", "sp")), chamfer_pair_ref, (S5,),
       bugs=[("no-swap", ["missing-collective"]), ("local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. Chamfer loss and its gradient for the predicted points, predicted and
#    target clouds both over sp4 (batch over dp2); jax.grad through the
#    all_gather of the predictions (its transpose returns the other devices'
#    target terms), loss psum'd over both axes.
PR6, TG6 = R(B, N, 3), R(B, 24, 3)


def chamfer_loss(p, t):
    d = sqdist(p, t)
    return jnp.mean(jnp.mean(jnp.min(d, 2), 1) + jnp.mean(jnp.min(d, 1), 1))


def chamfer_grad_ref(p, t):
    return jax.value_and_grad(chamfer_loss)(p, t)


def chamfer_grad_sp(bug):
    def f(p, t):
        n_p, n_t = p.shape[1] * 4, t.shape[1] * 4

        def local(pl):
            ta = lax.all_gather(t, "sp", axis=1, tiled=True)
            pa = lax.all_gather(pl, "sp", axis=1, tiled=True)
            if bug == "stop-gradient-on-gather":
                pa = lax.stop_gradient(pa)
            t1 = jnp.sum(jnp.min(sqdist(pl, ta), 2)) / n_p
            t2 = jnp.sum(jnp.min(sqdist(t, pa), 2)) / n_t
            return (t1 + t2) / B
        l, g = jax.value_and_grad(local)(p)
        if bug == "grad-divided-by-sp":
            g = g / 4
        return psum(l, ("dp", "sp")), g
    return f


C.smap("s.chamfer_grad_through_allgather.dp2xsp4", {"dp": 2, "sp": 4}, chamfer_grad_sp,
       (P("dp", "sp"), P("dp", "sp")), (P(), P("dp", "sp")), chamfer_grad_ref, (PR6, TG6),
       bugs=[("stop-gradient-on-gather", ["missing-collective"]), ("grad-divided-by-sp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. voxelisation by spatial hashing: points over sp8, voxel ids from the
#    integer voxel coordinates hashed (uint32 multiply / xor, mod a 16-slot
#    table), per-slot sums and counts by segment_sum psum'd, slot means, and
#    every point's slot mean scattered back ("devoxelised").
NV, TBL, VS = 64, 16, 0.5
X7, F7 = np.clip(R(NV, 3, scale=0.6), -0.99, 0.99), R(NV, 4)


def vox_hash(x):
    v = jnp.floor((x + 1.0) / VS).astype(jnp.uint32)
    h = (v[:, 0] * jnp.uint32(73856093)) ^ (v[:, 1] * jnp.uint32(19349663)) ^ (v[:, 2] * jnp.uint32(83492791))
    return (h % jnp.uint32(TBL)).astype(i32)


def voxel_ref(x, f):
    h = vox_hash(x)
    s = jax.ops.segment_sum(f, h, TBL)
    c = jax.ops.segment_sum(jnp.ones_like(h, jnp.float32), h, TBL)
    mean = s / jnp.maximum(c, 1.0)[:, None]
    return mean, mean[h]


def voxel_sp(bug):
    def f(x, fe):
        h = vox_hash(x)
        s = jax.ops.segment_sum(fe, h, TBL)
        c = jax.ops.segment_sum(jnp.ones_like(h, jnp.float32), h, TBL)
        if bug == "mean-of-local-means":
            mean = pmean(s / jnp.maximum(c, 1.0)[:, None], "sp")
        else:
            s = psum(s, "sp")
            if bug != "counts-not-psummed":
                c = psum(c, "sp")
            mean = s / jnp.maximum(c, 1.0)[:, None]
        return mean, mean[h]
    return f


C.smap("s.voxel_hash_segment_mean.sp8", {"sp": 8}, voxel_sp, (P("sp"), P("sp")), (P(), P("sp")), voxel_ref, (X7, F7),
       bugs=[("mean-of-local-means", ["wrong-scale"]), ("counts-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. PointPillars-style scatter to a 4 x 4 bird's-eye grid: per-point
#    features relu(f W) in bf16 (f32 accumulation), per-cell max by
#    segment_max, empty cells 0; points over sp4, clouds over dp2; cells
#    pmax'd over sp.
G8 = 4
W8 = R(CF, 8, scale=0.4, dt=jnp.bfloat16)
F8 = F.astype(jnp.bfloat16)


def bev_cells(x):
    ij = jnp.clip(jnp.floor((x[..., :2] + 2.0) / 1.0), 0, G8 - 1).astype(i32)
    return ij[..., 0] * G8 + ij[..., 1]


def pillar_feats(f, w):
    return jax.nn.relu(jnp.einsum("bnc,co->bno", f, w, preferred_element_type=jnp.float32))


def bev_ref(x, f, w):
    cell, h = bev_cells(x), pillar_feats(f, w)
    m = jax.vmap(lambda hh, cc: jax.ops.segment_max(hh, cc, G8 * G8))(h, cell)
    return jnp.where(jnp.isfinite(m), m, 0.0).reshape(-1, G8, G8, h.shape[-1])


def bev_sp(bug):
    def f(x, fe, w):
        cell, h = bev_cells(x), pillar_feats(fe, w)
        m = jax.vmap(lambda hh, cc: jax.ops.segment_max(hh, cc, G8 * G8))(h, cell)
        m = jnp.where(jnp.isfinite(m), m, 0.0)          # relu >= 0: an empty cell may be 0 before the pmax
        if bug == "psum-not-pmax":
            m = psum(m, "sp")
        elif bug == "pmax-over-dp-too":
            m = pmax(m, ("dp", "sp"))
        else:
            m = pmax(m, "sp")
        return m.reshape(-1, G8, G8, h.shape[-1])
    return f


C.smap("s.pillars_bev_segment_max.dp2xsp4", {"dp": 2, "sp": 4}, bev_sp, (P("dp", "sp"), P("dp", "sp"), P()),
       P("dp"), bev_ref, (X, F8, W8),
       bugs=[("psum-not-pmax", ["wrong-collective-op"]), ("pmax-over-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 9. a PointNet classification training step, clouds over dp2 and points over
#    sp4: the global max pool as a max over the all_gather'd local maxima
#    (pmax has no derivative), the replicated loss divided by the sp size so
#    the all_gather's transpose sums one copy, gradients psum'd over sp and
#    pmean'd over dp; optax SGD with Nesterov momentum.
B9, NCLS = 4, 5
X9, Y9 = R(B9, N, 3), I(0, NCLS, B9)
PN = dict(w1=R(3, 16, scale=0.5), b1=R(16, scale=0.1), w2=R(16, 24, scale=0.3), b2=R(24, scale=0.1),
          wc=R(24, NCLS, scale=0.3), bc=np.zeros(NCLS, np.float32))
OPT9 = optax.sgd(0.05, momentum=0.9, nesterov=True)
ST9 = OPT9.init(PN)


def pn_point_feats(p, x):
    return jax.nn.relu(jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])


def pn_ce(p, g, y):
    logits = g @ p["wc"] + p["bc"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))


def pn_step_ref(p, st, x, y):
    l, g = jax.value_and_grad(lambda pp: pn_ce(pp, jnp.max(pn_point_feats(pp, x), 1), y))(p)
    u, st = OPT9.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def pn_step_sp(bug):
    def f(p, st, x, y):
        def loss(pp):
            loc = jnp.max(pn_point_feats(pp, x), 1)
            g = loc if bug == "pool-local-points" else jnp.max(lax.all_gather(loc, "sp"), 0)
            l = pn_ce(pp, g, y)
            return l if bug == "loss-not-divided-by-sp" else l / 4
        l, g = jax.value_and_grad(loss)(p)
        g = jax.tree.map(lambda t: pmean(psum(t, "sp"), "dp"), g)
        l = pmean(psum(l, "sp"), "dp")
        u, st = OPT9.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


SPEC9 = jax.tree.map(lambda _: P(), PN)
SS9 = jax.tree.map(lambda _: P(), ST9)
C.smap("s.pointnet_cls_step_allgather_maxpool.dp2xsp4", {"dp": 2, "sp": 4}, pn_step_sp,
       (SPEC9, SS9, P("dp", "sp"), P("dp")), (SPEC9, SS9, P()), pn_step_ref, (PN, ST9, X9, Y9),
       bugs=[("loss-not-divided-by-sp", ["wrong-scale"]), ("pool-local-points", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. PointNet input T-Net: a 3x3 transform from a pmax-pooled global feature
#     (identity added), points transformed, a second shared MLP pooled by
#     pmax, and the orthogonality regulariser mean ||T T^T - I||^2 averaged by
#     pmean over (dp, sp) (the value is the same on every sp device); clouds
#     over dp2, points over sp4.
TN = dict(a1=R(3, 16, scale=0.5), a2=R(16, 9, scale=0.1), m1=R(3, 16, scale=0.5))


def tnet_parts(p, x, pool):
    t = pool(jax.nn.relu(x @ p["a1"])) @ p["a2"]
    t = t.reshape(-1, 3, 3) + jnp.eye(3)
    y = jnp.einsum("bnd,bde->bne", x, t)
    g = pool(jax.nn.relu(y @ p["m1"]))
    d = jnp.einsum("bij,bkj->bik", t, t) - jnp.eye(3)
    return y, g, jnp.sum(jnp.square(d), (1, 2))


def tnet_ref(p, x):
    y, g, r = tnet_parts(p, x, lambda h: jnp.max(h, 1))
    return y, g, jnp.mean(r)


def tnet_sp(bug):
    def f(p, x):
        if bug == "tnet-pooled-locally":
            t = jnp.max(jax.nn.relu(x @ p["a1"]), 1) @ p["a2"]
            t = t.reshape(-1, 3, 3) + jnp.eye(3)
            y = jnp.einsum("bnd,bde->bne", x, t)
            g = pmax(jnp.max(jax.nn.relu(y @ p["m1"]), 1), "sp")
            r = jnp.sum(jnp.square(jnp.einsum("bij,bkj->bik", t, t) - jnp.eye(3)), (1, 2))
        else:
            y, g, r = tnet_parts(p, x, lambda h: pmax(jnp.max(h, 1), "sp"))
        reg = psum(jnp.mean(r), "dp") if bug == "reg-psum-dp" else pmean(jnp.mean(r), ("dp", "sp"))
        return y, g, reg
    return f


C.smap("s.pointnet_tnet_pmax_orth_reg.dp2xsp4", {"dp": 2, "sp": 4}, tnet_sp, (P(), P("dp", "sp")),
       (P("dp", "sp"), P("dp"), P()), tnet_ref, (TN, X),
       bugs=[("tnet-pooled-locally", ["missing-all-reduce"]), ("reg-psum-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. PointNet++ feature propagation: 3-NN inverse-distance interpolation
#     from a sparse level (16 points over sp4) to a dense level (32 points,
#     replicated); local top-3 candidates all_gather'd and merged, weights
#     1 / (d^2 + eps) normalised after the merge; skip features concatenated,
#     then a unit MLP. Clouds over dp2.
NS = 16
XS11, FS11, SK11 = R(B, NS, 3), R(B, NS, CF), R(B, N, 4)
W11 = R(CF + 4, 12, scale=0.3)


def fp_ref(xd, xs, fs, skip, w):
    s, nb = lax.top_k(-sqdist(xd, xs), 3)
    wt = 1.0 / (-s + 1e-8)
    wt = wt / jnp.sum(wt, -1, keepdims=True)
    interp = jnp.sum(wt[..., None] * take_rows(fs, nb), 2)
    return jax.nn.relu(jnp.concatenate([interp, skip], -1) @ w)


def fp_sp(bug):
    def f(xd, xs, fs, skip, w):
        s, li = lax.top_k(-sqdist(xd, xs), 3)
        cf = take_rows(fs, li)
        if bug == "normalised-before-merge":
            wt = 1.0 / (-s + 1e-8)
            wl = wt / jnp.sum(wt, -1, keepdims=True)
            s, wl, cf = (lax.all_gather(t, "sp", axis=2, tiled=True) for t in (s, wl, cf))
            _, j = lax.top_k(s, 3)
            wt = jnp.take_along_axis(wl, j, 2)
        else:
            if bug != "merge-local-only":
                s, cf = (lax.all_gather(t, "sp", axis=2, tiled=True) for t in (s, cf))
            s, j = lax.top_k(s, 3)
            wt = 1.0 / (-s + 1e-8)
            wt = wt / jnp.sum(wt, -1, keepdims=True)
        interp = jnp.sum(wt[..., None] * jnp.take_along_axis(cf, j[..., None], 2), 2)
        return jax.nn.relu(jnp.concatenate([interp, skip], -1) @ w)
    return f


C.smap("s.pn2_feature_propagation_3nn.dp2xsp4", {"dp": 2, "sp": 4}, fp_sp,
       (P("dp"), P("dp", "sp"), P("dp", "sp"), P("dp"), P()), P("dp"), fp_ref, (X, XS11, FS11, SK11, W11),
       bugs=[("normalised-before-merge", ["wrong-scale"]), ("merge-local-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct only).


def pointnet_fwd_wsc(p, x):
    h = lax.with_sharding_constraint(pn_point_feats(p, x), NamedSharding(make_mesh({"dp": 2, "sp": 4}), P("dp", "sp")))
    return jnp.max(h, 1) @ p["wc"] + p["bc"]


C.gspmd("g.pointnet_fwd_points_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (SPEC9, P("dp", "sp")), P("dp"),
        pointnet_fwd_wsc, (PN, X9))
C.gspmd("g.chamfer_value_and_grad.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp")), (P(), P("dp", "sp")),
        chamfer_grad_ref, (PR6, TG6))
C.gspmd("g.voxel_hash_segment_mean.sp8", {"sp": 8}, (P("sp"), P("sp")), (P(), P("sp")), voxel_ref, (X7, F7))
C.gspmd("g.dgcnn_edgeconv_knn.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"), P("dp", "sp"), P()),
        (P("dp", "sp"), P("dp", "sp")), edgeconv_ref, (X, F, W3))

OPT_G = optax.adamw(1e-3, weight_decay=0.01)
ST_G = OPT_G.init(PN)


def pn_adamw_step(p, st, x, y):
    l, g = jax.value_and_grad(lambda pp: pn_ce(pp, jnp.max(pn_point_feats(pp, x), 1), y))(p)
    u, st = OPT_G.update(g, st, p)
    return optax.apply_updates(p, u), st, l


C.gspmd("g.pointnet_adamw_step.dp4", {"dp": 4}, (SPEC9, jax.tree.map(lambda _: P(), ST_G), P("dp"), P("dp")),
        (SPEC9, jax.tree.map(lambda _: P(), ST_G), P()), pn_adamw_step, (PN, ST_G, X9, Y9))

# ---------------------------------------------------------------------------
# 12. per-cloud voxel means with sums and counts packed into ONE all-reduce
#     written as a pmean (the ratio of two pmeans is the ratio of the psums);
#     empty voxels guarded by where(count > 0) so the 1/sp scale cancels;
#     clouds over dp2, points over sp4, voxel ids floor(x / 0.5) on a
#     4 x 4 x 4 grid.
G12 = 4
X12 = np.clip(R(B, N, 3, scale=0.7), -0.99, 0.99)
F12 = R(B, N, 4)


def vox_ids(x):
    v = jnp.clip(jnp.floor((x + 1.0) / 0.5), 0, G12 - 1).astype(i32)
    return (v[..., 0] * G12 + v[..., 1]) * G12 + v[..., 2]


def safe_mean(sums, cnt):
    return jnp.where(cnt[..., None] > 0, sums / jnp.where(cnt > 0, cnt, 1.0)[..., None], 0.0)


def vox_sums(x, f):
    ids = vox_ids(x)
    seg = jax.vmap(lambda ff, ii: jax.ops.segment_sum(ff, ii, G12 ** 3))
    return seg(f, ids), seg(jnp.ones(ids.shape, jnp.float32), ids)


def vox_packed_ref(x, f):
    s, c = vox_sums(x, f)
    return safe_mean(s, c)


def vox_packed_sp(bug):
    def f(x, fe):
        s, c = vox_sums(x, fe)
        packed = pmean(jnp.concatenate([s, c[..., None]], -1), ("dp", "sp") if bug == "pmean-over-dp-too" else "sp")
        s, c = packed[..., :-1], packed[..., -1]
        if bug == "clamp-after-pmean":
            return s / jnp.maximum(c, 1.0)[..., None]
        return safe_mean(s, c)
    return f


C.smap("s.voxel_packed_pmean_sums_counts.dp2xsp4", {"dp": 2, "sp": 4}, vox_packed_sp, (P("dp", "sp"), P("dp", "sp")),
       P("dp"), vox_packed_ref, (X12, F12),
       bugs=[("clamp-after-pmean", ["wrong-scale"]), ("pmean-over-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 13. an EdgeConv regression step: kNN on the all_gather'd positions (not
#     differentiated), neighbour features from the all_gather'd features,
#     loss on the device's own rows; jax.value_and_grad for the weight AND
#     the input features (the all_gather's transpose returns the other
#     devices' neighbour cotangents); the weight gradient psum'd over
#     (dp, sp); clouds over dp2, points over sp4.
TG13 = R(B, N, 12)


def ec_loss_ref(w, f, x, t):
    _, nb = lax.top_k(-sqdist(x, x), KN)
    out = edge_feats(f, take_rows(f, nb), w)
    return jnp.sum(jnp.square(out - t)) / (B * N)


def ec_grad_ref(w, f, x, t):
    l, (gw, gf) = jax.value_and_grad(ec_loss_ref, argnums=(0, 1))(w, f, x, t)
    return l, gw, gf


def ec_grad_sp(bug):
    def f(w, fe, x, t):
        xa = lax.all_gather(x, "sp", axis=1, tiled=True)
        _, nb = lax.top_k(-sqdist(x, xa), KN)

        def loss(w, fl):
            fa = lax.all_gather(fl, "sp", axis=1, tiled=True)
            if bug == "stop-gradient-on-gathered-features":
                fa = lax.stop_gradient(fa)
            out = edge_feats(fl, take_rows(fa, nb), w)
            return jnp.sum(jnp.square(out - t)) / (B * N)
        l, (gw, gf) = jax.value_and_grad(loss, argnums=(0, 1))(w, fe)
        gw = psum(gw, "sp" if bug == "weight-grad-psum-sp-only" else ("dp", "sp"))
        return psum(l, ("dp", "sp")), gw, gf
    return f


C.smap("s.edgeconv_grad_weight_and_features.dp2xsp4", {"dp": 2, "sp": 4}, ec_grad_sp,
       (P(), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), (P(), P(), P("dp", "sp")), ec_grad_ref, (W3, F, X, TG13),
       bugs=[("stop-gradient-on-gathered-features", ["missing-collective"]),
             ("weight-grad-psum-sp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. FPS written the other way: each device's (best distance, global index,
#     coordinates) all_gather'd and the winner picked by argmax over the
#     device axis (the first device on ties, as argmax over the whole cloud
#     would); points over sp8, one cloud.
X14 = R(N, 3)


def fps1_ref(p):
    ids, pts = fps_ref(p[None])
    return ids[0], pts[0]


def fps_ag(bug):
    def f(x):
        nl = x.shape[0]
        me = idx("sp")

        def winner(best, arg, pt):
            bs, ags, pts = (lax.all_gather(t, "sp") for t in (best, arg, pt))
            d = jnp.argmin(bs) if bug == "argmin-over-devices" else jnp.argmax(bs)
            return ags[d], pts[d]
        _, first = winner(jnp.where(me == 0, 1.0, 0.0), i32(0), x[0])

        def step(i, c):
            ids, dist, last = c
            dist = jnp.minimum(dist, jnp.sum(jnp.square(x - last), -1))
            a = jnp.argmax(dist)
            g = a.astype(i32) + (me * nl if bug != "index-without-offset" else 0)
            gi, pt = winner(dist[a], g, x[a])
            return ids.at[i].set(gi), dist, pt
        ids, _, _ = lax.fori_loop(1, KS, step, (jnp.zeros(KS, i32), jnp.full((nl,), jnp.inf), first))
        return ids, lax.all_gather(x, "sp", tiled=True)[ids]
    return f


C.smap("s.fps_allgather_candidates_argmax.sp8", {"sp": 8}, fps_ag, (P("sp"),), (P(), P()), fps1_ref, (X14,),
       bugs=[("argmin-over-devices", ["wrong-collective-op"]), ("index-without-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 15. a PointNet part-segmentation step with check_vma=True: per-point
#     features concatenated with a global MEAN pool (psum of local sums / N,
#     differentiable), per-point CE summed locally and psum'd over (dp, sp)
#     then divided by the number of points; jax.grad through the psum (the
#     replicated weights' gradients come back complete), optax SGD.
NSEG = 3
Y15 = I(0, NSEG, B, N)
SEG = dict(w1=R(3, 12, scale=0.5), w2=R(24, NSEG, scale=0.3), b2=np.zeros(NSEG, np.float32))
OPT15 = optax.sgd(0.1)
ST15 = OPT15.init(SEG)


def seg_logits(p, x, pool_mean):
    h = jax.nn.relu(x @ p["w1"])
    g = jnp.broadcast_to(pool_mean(h)[:, None], h.shape)
    return jnp.concatenate([h, g], -1) @ p["w2"] + p["b2"]


def seg_nll(logits, y):
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1)[..., 0]


def seg_step_ref(p, st, x, y):
    l, g = jax.value_and_grad(lambda pp: jnp.mean(seg_nll(seg_logits(pp, x, lambda h: jnp.mean(h, 1)), y)))(p)
    u, st = OPT15.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def seg_step_sp(bug):
    def f(p, st, x, y):
        def pool(h):
            if bug == "pool-local-mean":
                return jnp.mean(h, 1)
            return psum(jnp.sum(h, 1), "sp") / N

        def loss(pp):
            return psum(jnp.sum(seg_nll(seg_logits(pp, x, pool), y)), ("dp", "sp")) / (B * N)
        l, g = jax.value_and_grad(loss)(p)
        if bug == "grads-psummed-again":
            g = jax.tree.map(lambda t: psum(t, ("dp", "sp")), g)
        u, st = OPT15.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


SPEC15 = jax.tree.map(lambda _: P(), SEG)
C.smap("s.pointnet_seg_step_vma_grad_through_psum.dp2xsp4", {"dp": 2, "sp": 4}, seg_step_sp,
       (SPEC15, jax.tree.map(lambda _: P(), ST15), P("dp", "sp"), P("dp", "sp")),
       (SPEC15, jax.tree.map(lambda _: P(), ST15), P()), seg_step_ref, (SEG, ST15, X, Y15), check_vma=True,
       bugs=[("pool-local-mean", ["missing-all-reduce"]), ("grads-psummed-again", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. a hashed voxel table sharded over its slots: points over sp8, per-slot
#     sums and counts scattered with .at[].add on the full 16-slot table,
#     reduce-scattered (psum_scatter, tiled) so each device owns 2 slots and
#     divides there; the slot means returned with the slots over sp.


def voxel_table_ref(x, f):
    return voxel_ref(x, f)[0]


def voxel_table_sp(bug):
    def f(x, fe):
        h = vox_hash(x)
        s = jnp.zeros((TBL, fe.shape[1]), fe.dtype).at[h].add(fe)
        c = jnp.zeros((TBL,), jnp.float32).at[h].add(1.0)
        if bug == "means-then-scatter":
            return lax.psum_scatter(s / jnp.maximum(c, 1.0)[:, None], "sp", scatter_dimension=0, tiled=True)
        s = lax.psum_scatter(s, "sp", scatter_dimension=0, tiled=True)
        if bug == "counts-first-block":
            c = psum(c, "sp")[:TBL // 8]
        else:
            c = lax.psum_scatter(c, "sp", scatter_dimension=0, tiled=True)
        return s / jnp.maximum(c, 1.0)[:, None]
    return f


C.smap("s.voxel_table_slots_psum_scatter.sp8", {"sp": 8}, voxel_table_sp, (P("sp"), P("sp")), P("sp"),
       voxel_table_ref, (X7, F7),
       bugs=[("means-then-scatter", ["wrong-scale"]), ("counts-first-block", ["wrong-offset"])])

C.gspmd("g.fps_fori_loop_points_sharded.dp2xsp4", {"dp": 2, "sp": 4}, (P("dp", "sp"),), (P("dp"), P("dp")),
        fps_ref, (X,))
C.gspmd("g.ballquery_group_mlp.sp4", {"sp": 4}, (P(None, "sp"), P(None, "sp"), P(), P(), P(), P()), P(),
        ballq_ref, (X, F, CEN, W2a, b2a, W2b))
SPEC_PT = jax.tree.map(lambda _: P(), PT)
C.gspmd("g.point_transformer_attn.dp2xsp4", {"dp": 2, "sp": 4}, (SPEC_PT, P("dp", "sp"), P("dp", "sp")),
        P("dp", "sp"), ptattn_ref, (PT, X, F))

C.finish()
