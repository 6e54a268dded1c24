"""samples/fresh64: a 64th batch of programs as a user writes them, on the theme of classic graph algorithms on graphs distributed over devices in current JAX (PageRank by power iteration with the adjacency sharded by source rows, by destination columns or in 2-D blocks, on a sharded edge list, personalised PageRank, BFS levels by frontier expansion with a "changed" flag, Bellman-Ford with segment_min, min-plus APSP by a ppermute ring, connected components by label propagation with pmin, triangle counting, degree statistics and k-core peeling, HITS with global normalisation), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.

shard_map families (vertices owned by blocks of devices):
 1. PageRank, adjacency rows (sources) over v8, ranks owned in blocks,
    fori_loop of 20 steps: the partial A_loc^T x psum_scatter'd to the
    destination owners, dangling mass psum'd. Bugs: dangling mass of the
    own block only (no psum), teleport (1-d)/n_local, the partial product
    sliced at the own block without any reduction.
 2. personalised PageRank, adjacency columns (destinations) over v4, ranks
    all_gather'd each step, out-degrees psum'd over the column blocks,
    while_loop until the psum'd L1 change is below 1e-5 (cap 200), the
    dangling mass from the gathered ranks. Bugs: dangling mass of the own
    block only (no psum; a first draft's "out-degrees of the local columns"
    diverged to inf / NaN and was replaced), the personalisation
    vector sliced at offset 0 instead of the owner offset.
 3. PageRank on 2-D blocks (r2 x c4: source rows over r, destination
    columns over c): degrees psum'd over c, the partial product psum'd
    over r, the new ranks all_gather'd over c, dangling psum'd over r.
    Bugs: the partial product psum'd over c, the source-row offset taken
    from the c index, dangling mass psum'd over c (the other half lost).
 4. PageRank on an edge list sharded over e8 (ranks replicated),
    lax.scan of 15 steps, segment_sum for degrees and contributions, the
    teleport and dangling term added inside the psum on device 0 only.
    Bugs: teleport added on every device, degrees not psum'd.
 5. multi-root BFS levels (roots over g2, adjacency columns over v4),
    while_loop on a "changed" flag pmax'd over v only (each root group
    stops on its own; extra iterations would be no-ops), the frontier
    all_gather'd. Bugs: root compared with local vertex ids (no owner
    offset), owner offset taken from the g index.
 5b. the same BFS with one global flag (psum of the new-vertex counts over
    (g, v)). Bugs: the gathered frontier's blocks in reversed order, new
    vertices given level k instead of k + 1.
 5c. the multi-root BFS of 5. carrying the all_gather'd frontier, the flag
    a psum over v of the (already v-replicated) gathered frontier's any()
    compared with 0 (counted 4 times, harmless), each g group stopping on
    its own; and the same on a 1-D mesh v4 with the roots replicated.
    Correct only (probes of the "changed" flag).
 5d. the multi-root BFS of 5c. with the group's flag as a psum over v of
    the local new-vertex counts, and as a pmax over v of the gathered
    frontier's any(). Correct only.
 6. Bellman-Ford, edges partitioned by destination block (padded on the
    host), distances owned in blocks and all_gather'd, segment_min into
    the local block at dst - owner offset, fori_loop. Bugs: no owner
    offset (other blocks' edges dropped), the next block's offset.
 7. all-pairs shortest paths by min-plus squaring (3 squarings), rows
    over v4, the k-row blocks passed around a ppermute ring to the left
    with the block index (me + s) % n. Bugs: ring step to the right (the
    index formula kept), k columns always at the own block.
 8. connected components by label propagation on an undirected edge list
    over e8, labels replicated, segment_min then pmin, pointer jumping
    L = L[L], while_loop on a psum'd changed flag. Bugs: no pmin (labels
    diverge per device), pmax instead of pmin.
 9. triangle counting in int8 / int32 (dot with preferred_element_type),
    adjacency rows over v4 all_gather'd: per-vertex counts and the total
    psum'd. Bugs: total not psum'd, own rows read from the gathered
    matrix at offset 0.
10. degree statistics and 3-core peeling, rows over v4: mean degree as
    psum / N, max by pmax, alive mask all_gather'd inside a while_loop on
    a psum'd changed flag, core size psum'd; vertices ordered by degree so
    the largest degrees are on the last device. Bugs: mean over the local
    vertex count, max without pmax, core size not psum'd.
11. HITS, adjacency rows (sources) over v4, 15 steps: authorities from a
    psum_scatter of A_loc^T h, normalised by the psum'd norm and
    all_gather'd; hubs A_loc a normalised by the psum'd norm. Bugs: hub
    norm of the local block, authority partial sliced without reduction.
12. batched personalised PageRank (personalisations over b2, vertices
    over v4) whose reduce-scatter is written as a ppermute ring (n - 1
    steps to the right, chunk (me - 1 - s) % n). Bugs: the ring step to
    the left, dangling mass not psum'd over v.
13. push-style PageRank whose messages go by all_to_all: edges owned by
    the source's device, bucketed on the host by the destination's device
    (global ids, padding of weight 0), the destination ids exchanged once
    by all_to_all, the messages every step, segment_sum into the own block.
    Bugs: source ids without the owner offset, destination ids not
    exchanged (the own buckets' ids used).
GSPMD pairs (jax.jit with in/out shardings): 14. PageRank with the
adjacency rows over v8; 15. triangle counts with the adjacency over
r2 x c4; 16. HITS with the adjacency columns over v4; 17. Bellman-Ford on
an edge list over e8; 18. label-propagation components with a while_loop
on an edge list over e8; 19. 3-core peeling (k an input) with rows over
v4.
Dangling vertices are those with deg < 0.5 (degrees are counts), so that
random float inputs also exercise the dangling-mass paths.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh64.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh64.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh64.py"
C = Corpus("samples/fresh64", SCRIPT, "samples/gen/run_fresh64.sh", sys.argv[1:])
rng, R, I = seeded(6464)
psum, pmax, pmin, idx = lax.psum, lax.pmax, lax.pmin, lax.axis_index
DAMP = 0.85
N = 32


def random_digraph(n, p, dangling=()):
    a = (rng.random((n, n)) < p).astype(np.float32)
    np.fill_diagonal(a, 0)
    for v in dangling:
        a[v] = 0
    return a


def random_undirected(n, p):
    a = np.triu((rng.random((n, n)) < p).astype(np.float32), 1)
    return a + a.T


# dangling vertices in every block of 4 and of 8
A = random_digraph(N, 0.15, dangling=(3, 13, 22, 30, 5))
AU = random_undirected(N, 0.18)
R0 = np.full((N,), 1.0 / N, np.float32)


def safe_inv(deg):
    # degrees are counts: a vertex with deg < 0.5 is dangling
    return jnp.where(deg > 0.5, 1.0 / jnp.maximum(deg, 0.5), 0.0)


# ---------------------------------------------------------------------------
# 1. PageRank, adjacency rows over v8.


def pagerank(a, r0, iters=20):
    n = a.shape[0]
    deg = a.sum(1)

    def step(_, r):
        x = r * safe_inv(deg)
        dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
        return (1 - DAMP) / n + DAMP * (a.T @ x + dang / n)
    return lax.fori_loop(0, iters, step, r0)


def pr_rows(bug):
    def f(a_loc, r_loc):
        n, nl = a_loc.shape[1], a_loc.shape[0]
        me = idx("v")
        deg = a_loc.sum(1)

        def step(_, r):
            x = r * safe_inv(deg)
            part = a_loc.T @ x
            if bug == "slice-without-reduce":
                y = lax.dynamic_slice_in_dim(part, me * nl, nl)
            else:
                y = lax.psum_scatter(part, "v", tiled=True)
            dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
            if bug != "dangling-own-block":
                dang = psum(dang, "v")
            tele = (1 - DAMP) / (nl if bug == "teleport-local-count" else n)
            return tele + DAMP * (y + dang / n)
        return lax.fori_loop(0, 20, step, r_loc)
    return f


C.smap("s.pagerank_rows_psum_scatter.v8", {"v": 8}, pr_rows, (P("v"), P("v")), P("v"), pagerank, (A, R0),
       bugs=[("dangling-own-block", ["missing-collective"]), ("teleport-local-count", ["wrong-scale"]),
             ("slice-without-reduce", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. personalised PageRank, adjacency columns over v4, while_loop.


def ppr_until(a, pers, r0, tol=1e-5, cap=200):
    deg = a.sum(1)

    def cond(c):
        return (c[1] > tol) & (c[2] < cap)

    def body(c):
        r = c[0]
        x = r * safe_inv(deg)
        dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
        rn = (1 - DAMP) * pers + DAMP * (jnp.dot(x, a) + dang * pers)
        return rn, jnp.sum(jnp.abs(rn - r)), c[2] + 1
    return lax.while_loop(cond, body, (r0, jnp.float32(1.0), 0))[0]


def ppr_cols(bug):
    def f(a_loc, pers, r_loc):
        nl = a_loc.shape[1]
        me = idx("v")
        deg = psum(a_loc.sum(1), "v")
        p_loc = lax.dynamic_slice_in_dim(pers, 0 if bug == "personal-slice-at-0" else me * nl, nl)

        def cond(c):
            return (c[1] > 1e-5) & (c[2] < 200)

        def body(c):
            r = c[0]
            rf = lax.all_gather(r, "v", tiled=True)
            x = rf * safe_inv(deg)
            if bug == "dangling-own-block-no-psum":
                dang = jnp.sum(jnp.where(lax.dynamic_slice_in_dim(deg, me * nl, nl) < 0.5, r, 0.0))
            else:
                dang = jnp.sum(jnp.where(deg < 0.5, rf, 0.0))
            rn = (1 - DAMP) * p_loc + DAMP * (jnp.dot(x, a_loc) + dang * p_loc)
            return rn, psum(jnp.sum(jnp.abs(rn - r)), "v"), c[2] + 1
        return lax.while_loop(cond, body, (r_loc, jnp.float32(1.0), 0))[0]
    return f


PERS = np.zeros(N, np.float32)
PERS[[1, 9, 10, 27]] = [0.4, 0.3, 0.2, 0.1]
C.smap("s.ppr_cols_allgather_while.v4", {"v": 4}, ppr_cols, (P(None, "v"), P(), P("v")), P("v"), ppr_until,
       (A, PERS, R0), bugs=[("dangling-own-block-no-psum", ["missing-collective"]),
                            ("personal-slice-at-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. PageRank on 2-D blocks r2 x c4, ranks replicated.


def pr_2d(bug):
    def f(a_blk, r0):
        n = r0.shape[0]
        nr = a_blk.shape[0]
        deg = psum(a_blk.sum(1), "c")
        off = (idx("c") if bug == "row-offset-from-c" else idx("r")) * nr

        def step(_, r):
            rs = lax.dynamic_slice_in_dim(r, off, nr)
            x = rs * safe_inv(deg)
            part = jnp.einsum("i,ij->j", x, a_blk)
            yb = psum(part, "c" if bug == "product-psum-over-c" else "r")
            y = lax.all_gather(yb, "c", tiled=True)
            dang = psum(jnp.sum(jnp.where(deg < 0.5, rs, 0.0)), "c" if bug == "dangling-psum-over-c" else "r")
            return (1 - DAMP) / n + DAMP * (y + dang / n)
        return lax.fori_loop(0, 20, step, r0)
    return f


C.smap("s.pagerank_2d_blocks.r2xc4", {"r": 2, "c": 4}, pr_2d, (P("r", "c"), P()), P(), pagerank, (A, R0),
       bugs=[("product-psum-over-c", ["wrong-axis"]), ("row-offset-from-c", ["wrong-offset"]),
             ("dangling-psum-over-c", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 4. PageRank on an edge list over e8, ranks replicated, lax.scan.
SRC, DST = np.nonzero(A)
PAD = (-len(SRC)) % 8
SRC = np.concatenate([SRC, np.zeros(PAD, int)]).astype(np.int32)
DST = np.concatenate([DST, np.zeros(PAD, int)]).astype(np.int32)
WE = np.concatenate([np.ones(len(SRC) - PAD), np.zeros(PAD)]).astype(np.float32)  # padding weight 0


def pr_edges(src, dst, w, r0):
    n = r0.shape[0]
    deg = jax.ops.segment_sum(w, src, n)

    def step(r, _):
        x = r * safe_inv(deg)
        dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
        c = jax.ops.segment_sum(w * x[src], dst, n)
        return (1 - DAMP) / n + DAMP * (c + dang / n), None
    return lax.scan(step, r0, None, length=15)[0]


def pr_edges_e(bug):
    def f(src, dst, w, r0):
        n = r0.shape[0]
        deg = jax.ops.segment_sum(w, src, n)
        if bug != "degree-not-psummed":
            deg = psum(deg, "e")
        first = (idx("e") == 0).astype(jnp.float32)
        if bug == "teleport-every-device":
            first = 1.0

        def step(r, _):
            x = r * safe_inv(deg)
            dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
            c = jax.ops.segment_sum(w * x[src], dst, n)
            return psum(DAMP * c + first * ((1 - DAMP) / n + DAMP * dang / n), "e"), None
        return lax.scan(step, r0, None, length=15)[0]
    return f


C.smap("s.pagerank_edgelist_scan.e8", {"e": 8}, pr_edges_e, (P("e"), P("e"), P("e"), P()), P(), pr_edges,
       (SRC, DST, WE, R0), bugs=[("teleport-every-device", ["wrong-scale"]),
                                 ("degree-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 5. multi-root BFS levels, roots over g2, adjacency columns over v4.


def bfs_levels(a, roots):
    n = a.shape[0]
    lev = jnp.where(jnp.arange(n)[None, :] == roots[:, None], 0, -1).astype(jnp.int32)

    def cond(c):
        return c[3]

    def body(c):
        lev, front, k, _ = c
        nxt = (front @ a > 0) & (lev < 0)
        return jnp.where(nxt, k + 1, lev), nxt.astype(jnp.float32), k + 1, jnp.any(nxt)
    return lax.while_loop(cond, body, (lev, (lev == 0).astype(jnp.float32), 0, True))[0]


def bfs_sharded(bug):
    def f(a_loc, roots):
        nl = a_loc.shape[1]
        if bug == "root-local-ids":
            ids = jnp.arange(nl)
        elif bug == "offset-from-g":
            ids = idx("g") * nl + jnp.arange(nl)
        else:
            ids = idx("v") * nl + jnp.arange(nl)
        lev = jnp.where(ids[None, :] == roots[:, None], 0, -1).astype(jnp.int32)

        def cond(c):
            return c[3] > 0

        def body(c):
            lev, front, k, _ = c
            ff = lax.all_gather(front, "v", axis=1, tiled=True)
            nxt = (ff @ a_loc > 0) & (lev < 0)
            ch = pmax(jnp.any(nxt).astype(jnp.int32), "v")
            return jnp.where(nxt, k + 1, lev), nxt.astype(jnp.float32), k + 1, ch
        return lax.while_loop(cond, body, (lev, (lev == 0).astype(jnp.float32), 0, jnp.int32(1)))[0]
    return f


ROOTS = np.array([0, 11, 19, 26], np.int32)
C.smap("s.bfs_multiroot_frontier.g2xv4", {"g": 2, "v": 4}, bfs_sharded, (P(None, "v"), P("g")), P("g", "v"),
       bfs_levels, (A, ROOTS), bugs=[("root-local-ids", ["wrong-offset"]), ("offset-from-g", ["wrong-offset"])])



def bfs_global_flag(bug):
    def f(a_loc, roots):
        nl = a_loc.shape[1]
        me = idx("v")
        ids = me * nl + jnp.arange(nl)
        lev = jnp.where(ids[None, :] == roots[:, None], 0, -1).astype(jnp.int32)

        def cond(c):
            return c[3]

        def body(c):
            lev, front, k, _ = c
            if bug == "frontier-gathered-reversed":
                ff = lax.all_gather(front, "v", axis=1, tiled=True)
                ff = jnp.concatenate([ff[:, (3 - j) * nl:(4 - j) * nl] for j in range(4)], 1)
            else:
                ff = lax.all_gather(front, "v", axis=1, tiled=True)
            nxt = (ff @ a_loc > 0) & (lev < 0)
            lev = jnp.where(nxt, (k if bug == "level-k-not-k1" else k + 1), lev)
            ch = psum(jnp.sum(nxt.astype(jnp.int32)), ("g", "v")) > 0
            return lev, nxt.astype(jnp.float32), k + 1, ch
        return lax.while_loop(cond, body, (lev, (lev == 0).astype(jnp.float32), 0, True))[0]
    return f


C.smap("s.bfs_global_changed_flag.g2xv4", {"g": 2, "v": 4}, bfs_global_flag, (P(None, "v"), P("g")), P("g", "v"),
       bfs_levels, (A, ROOTS), bugs=[("frontier-gathered-reversed", ["wrong-permutation"]),
                                     ("level-k-not-k1", ["wrong-offset"])])

# 5c. the same multi-root BFS carrying the all_gather'd frontier: the next
#     frontier is gathered at the end of the step and the "changed" flag is
#     a psum over v of that (already v-replicated) frontier's any(), > 0:
#     counted 4 times, but only compared with 0; each g group stops alone.


def bfs_gathered_carry(bug):
    def f(a_loc, roots):
        n, nl = a_loc.shape
        me = idx("v")
        ids = me * nl + jnp.arange(nl)
        lev = jnp.where(ids[None, :] == roots[:, None], 0, -1).astype(jnp.int32)
        ff0 = lax.all_gather((lev == 0).astype(jnp.float32), "v", axis=1, tiled=True)

        def body(c):
            lev, ff, k, _ = c
            nxt = (ff @ a_loc > 0) & (lev < 0)
            ffn = lax.all_gather(nxt.astype(jnp.float32), "v", axis=1, tiled=True)
            ch = psum(jnp.any(ffn > 0).astype(jnp.int32), "v") > 0
            return jnp.where(nxt, k + 1, lev), ffn, k + 1, ch
        return lax.while_loop(lambda c: c[3], body, (lev, ff0, 0, True))[0]
    return f


C.smap("s.bfs_multiroot_gathered_frontier_flag.g2xv4", {"g": 2, "v": 4}, bfs_gathered_carry,
       (P(None, "v"), P("g")), P("g", "v"), bfs_levels, (A, ROOTS))


def bfs_group_flag(bug):
    """5d: the flag of 5. written two more ways: a psum over v of the local
    new-vertex count (flag="count"), a pmax over v of the gathered
    frontier's any() (flag="pmax-gathered")."""
    def f(a_loc, roots):
        n, nl = a_loc.shape
        ids = idx("v") * nl + jnp.arange(nl)
        lev = jnp.where(ids[None, :] == roots[:, None], 0, -1).astype(jnp.int32)
        ff0 = lax.all_gather((lev == 0).astype(jnp.float32), "v", axis=1, tiled=True)

        def body(c):
            lev, ff, k, _ = c
            nxt = (ff @ a_loc > 0) & (lev < 0)
            ffn = lax.all_gather(nxt.astype(jnp.float32), "v", axis=1, tiled=True)
            if bug == "count":
                ch = psum(jnp.sum(nxt.astype(jnp.int32)), "v") > 0
            else:
                ch = pmax(jnp.any(ffn > 0).astype(jnp.int32), "v") > 0
            return jnp.where(nxt, k + 1, lev), ffn, k + 1, ch
        return lax.while_loop(lambda c: c[3], body, (lev, ff0, 0, True))[0]
    return f


for _flag in ("count", "pmax-gathered"):
    C.smap("s.bfs_multiroot_group_flag_%s.g2xv4" % _flag, {"g": 2, "v": 4}, lambda b, _f=_flag: bfs_group_flag(_f),
           (P(None, "v"), P("g")), P("g", "v"), bfs_levels, (A, ROOTS))


def bfs_gathered_carry_1d(bug):
    def f(a_loc, roots):
        n, nl = a_loc.shape
        ids = idx("v") * nl + jnp.arange(nl)
        lev = jnp.where(ids[None, :] == roots[:, None], 0, -1).astype(jnp.int32)
        ff0 = lax.all_gather((lev == 0).astype(jnp.float32), "v", axis=1, tiled=True)

        def body(c):
            lev, ff, k, _ = c
            nxt = (ff @ a_loc > 0) & (lev < 0)
            ffn = lax.all_gather(nxt.astype(jnp.float32), "v", axis=1, tiled=True)
            ch = psum(jnp.any(ffn > 0).astype(jnp.int32), "v") > 0
            return jnp.where(nxt, k + 1, lev), ffn, k + 1, ch
        return lax.while_loop(lambda c: c[3], body, (lev, ff0, 0, True))[0]
    return f


C.smap("s.bfs_gathered_frontier_flag.v4", {"v": 4}, bfs_gathered_carry_1d,
       (P(None, "v"), P()), P(None, "v"), bfs_levels, (A, ROOTS))

# ---------------------------------------------------------------------------
# 6. Bellman-Ford, edges partitioned by destination block over v4.
INF = 1e9
WA = (A * rng.uniform(0.1, 2.0, A.shape)).astype(np.float32)


def edges_by_dst_block(w, nb):
    s, d = np.nonzero(w)
    nl = w.shape[0] // nb
    blocks = [np.nonzero(d // nl == b)[0] for b in range(nb)]
    m = max(len(b) for b in blocks)
    m += m % 2  # 4 blocks of an even count: the edge list also splits over e8
    S, D, W = [], [], []
    for b, e in enumerate(blocks):
        pad = m - len(e)
        S.append(np.concatenate([s[e], np.zeros(pad, int)]))
        D.append(np.concatenate([d[e], np.full(pad, b * nl)]))
        W.append(np.concatenate([w[s[e], d[e]], np.full(pad, INF)]))
    return (np.concatenate(S).astype(np.int32), np.concatenate(D).astype(np.int32),
            np.concatenate(W).astype(np.float32))


BS, BD, BW = edges_by_dst_block(WA, 4)
D0 = np.full((N,), INF, np.float32)
D0[2] = 0.0


def bellman_ford(src, dst, w, d0):
    def step(_, d):
        return jnp.minimum(d, jax.ops.segment_min(d[src] + w, dst, d.shape[0]))
    return lax.fori_loop(0, 12, step, d0)


def bf_sharded(bug):
    def f(src, dst, w, d_loc):
        nl, n = d_loc.shape[0], 4
        me = idx("v")
        if bug == "no-owner-offset":
            local = dst
        elif bug == "next-block-offset":
            local = dst - ((me + 1) % n) * nl
        else:
            local = dst - me * nl

        def step(_, d):
            df = lax.all_gather(d, "v", tiled=True)
            return jnp.minimum(d, jax.ops.segment_min(df[src] + w, local, nl))
        return lax.fori_loop(0, 12, step, d_loc)
    return f


C.smap("s.bellman_ford_dst_blocks_segment_min.v4", {"v": 4}, bf_sharded, (P("v"),) * 4, P("v"), bellman_ford,
       (BS, BD, BW, D0), bugs=[("no-owner-offset", ["wrong-offset"]), ("next-block-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. APSP by min-plus squaring, rows over v4, k blocks around a ring.
N7 = 16
W7 = random_digraph(N7, 0.25) * rng.uniform(0.5, 3.0, (N7, N7)).astype(np.float32)
D7 = np.where(W7 > 0, W7, 1e4).astype(np.float32)
np.fill_diagonal(D7, 0.0)


def apsp(d):
    for _ in range(3):
        d = jnp.min(d[:, :, None] + d[None, :, :], axis=1)
    return d


def apsp_ring(bug):
    def f(d_loc):
        n, nl = 4, d_loc.shape[0]
        me = idx("v")
        perm = [(i, (i + 1) % n) for i in range(n)] if bug == "ring-step-right" else \
            [(i, (i - 1) % n) for i in range(n)]
        for _ in range(3):
            def ring(s, c):
                out, blk = c
                kb = me if bug == "k-cols-own-block" else (me + s) % n
                dk = lax.dynamic_slice_in_dim(d_loc, kb * nl, nl, 1)
                out = jnp.minimum(out, jnp.min(dk[:, :, None] + blk[None], axis=1))
                return out, lax.ppermute(blk, "v", perm)
            d_loc = lax.fori_loop(0, n, ring, (jnp.full_like(d_loc, jnp.inf), d_loc))[0]
        return d_loc
    return f


C.smap("s.apsp_minplus_ring.v4", {"v": 4}, apsp_ring, (P("v"),), P("v"), apsp, (D7,),
       bugs=[("ring-step-right", ["wrong-permutation"]), ("k-cols-own-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. connected components by label propagation on an edge list over e8.
# a sparser graph so that there are several components
AS = random_undirected(N, 0.05)
SS, SD = np.nonzero(AS)
PADS = (-len(SS)) % 8
SS = np.concatenate([SS, np.arange(PADS)]).astype(np.int32)
SD = np.concatenate([SD, np.arange(PADS)]).astype(np.int32)


def components(src, dst, n=N):
    lab = jnp.arange(n, dtype=jnp.int32)

    def body(c):
        lab, _ = c
        new = jnp.minimum(lab, jax.ops.segment_min(lab[src], dst, n))
        new = new[new]
        return new, jnp.any(new != lab)
    return lax.while_loop(lambda c: c[1], body, (lab, True))[0]


def cc_sharded(bug):
    def f(src, dst):
        lab = jnp.arange(N, dtype=jnp.int32)

        def body(c):
            lab, _ = c
            cand = jax.ops.segment_min(lab[src], dst, N)
            if bug == "pmax-not-pmin":
                cand = pmax(cand, "e")
            elif bug != "no-pmin":
                cand = pmin(cand, "e")
            new = jnp.minimum(lab, cand)
            new = new[new]
            return new, psum(jnp.sum(new != lab), "e") > 0
        return lax.while_loop(lambda c: c[1], body, (lab, jnp.bool_(True)))[0]
    return f


C.smap("s.components_label_prop_pmin.e8", {"e": 8}, cc_sharded, (P("e"), P("e")), P(), components, (SS, SD),
       bugs=[("no-pmin", ["missing-collective"]), ("pmax-not-pmin", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. triangle counting in int8 / int32, rows over v4.
AU8 = AU.astype(np.int8)


def triangles(a):
    aa = jnp.dot(a, a, preferred_element_type=jnp.int32)
    t = jnp.sum(a.astype(jnp.int32) * aa, 1) // 2
    return t, jnp.sum(t) // 3


def tri_rows(bug):
    def f(a_loc):
        nl = a_loc.shape[0]
        af = lax.all_gather(a_loc, "v", tiled=True)
        mine = lax.dynamic_slice_in_dim(af, 0 if bug == "own-rows-at-0" else idx("v") * nl, nl)
        aa = jnp.dot(mine, af, preferred_element_type=jnp.int32)
        t = jnp.sum(a_loc.astype(jnp.int32) * aa, 1) // 2
        tot = jnp.sum(t)
        if bug != "total-not-psummed":
            tot = psum(tot, "v")
        return t, tot // 3
    return f


C.smap("s.triangles_int8_rows_allgather.v4", {"v": 4}, tri_rows, (P("v"),), (P("v"), P()), triangles, (AU8,),
       bugs=[("total-not-psummed", ["missing-collective"]), ("own-rows-at-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. degree statistics and 3-core peeling, rows over v4.


def kcore(a, k):
    deg = a.sum(1)
    n = a.shape[0]

    def body(c):
        alive, _ = c
        d = a @ alive
        new = alive * (d >= k)
        return new, jnp.any(new != alive)
    alive = lax.while_loop(lambda c: c[1], body, (jnp.ones(n, jnp.float32), True))[0]
    return alive, jnp.sum(alive), jnp.mean(deg), jnp.max(deg)


def kcore_rows(bug):
    def f(a_loc, k):
        nl, n = a_loc.shape
        deg = a_loc.sum(1)
        mean = psum(deg.sum(), "v") / (nl if bug == "mean-local-count" else n)
        mx = deg.max() if bug == "max-no-pmax" else pmax(deg.max(), "v")

        def body(c):
            alive, _ = c
            d = a_loc @ lax.all_gather(alive, "v", tiled=True)
            new = alive * (d >= k)
            return new, psum(jnp.sum(jnp.abs(new - alive)), "v") > 0
        alive = lax.while_loop(lambda c: c[1], body, (jnp.ones(nl, jnp.float32), jnp.bool_(True)))[0]
        size = jnp.sum(alive)
        if bug != "size-not-psummed":
            size = psum(size, "v")
        return alive, size, mean, mx
    return f


AK = random_undirected(N, 0.12)
_o = np.argsort(AK.sum(1), kind="stable")  # vertices by degree: the largest ones on the last device
AK = AK[_o][:, _o]
C.smap("s.kcore_peeling_degree_stats.v4", {"v": 4}, kcore_rows, (P("v"), P()), (P("v"), P(), P(), P()), kcore,
       (AK, np.float32(3)),
       bugs=[("mean-local-count", ["wrong-scale"]), ("max-no-pmax", ["missing-collective"]),
             ("size-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. HITS, adjacency rows over v4.
AH = random_digraph(N, 0.2)


def hits(a, h0):
    def step(_, c):
        h, a_ = c
        au = a.T @ h
        au = au / jnp.linalg.norm(au)
        hu = a @ au
        return hu / jnp.linalg.norm(hu), au
    return lax.fori_loop(0, 15, step, (h0, jnp.zeros(a.shape[1], jnp.float32)))


def hits_rows(bug):
    def f(a_loc, h_loc):
        nl = a_loc.shape[0]

        def step(_, c):
            h, _a = c
            part = jnp.einsum("ij,i->j", a_loc, h)
            if bug == "authority-slice-no-reduce":
                al = lax.dynamic_slice_in_dim(part, idx("v") * nl, nl)
            else:
                al = lax.psum_scatter(part, "v", tiled=True)
            al = al * lax.rsqrt(psum(jnp.sum(al * al), "v"))
            af = lax.all_gather(al, "v", tiled=True)
            hu = a_loc @ af
            ss = jnp.sum(hu * hu)
            if bug != "hub-norm-local":
                ss = psum(ss, "v")
            return hu / jnp.sqrt(ss), af
        return lax.fori_loop(0, 15, step, (h_loc, jnp.zeros(a_loc.shape[1], jnp.float32)))
    return f


H0 = np.full((N,), 1.0 / np.sqrt(N), np.float32)
C.smap("s.hits_rows_scatter_normalise.v4", {"v": 4}, hits_rows, (P("v"), P("v")), (P("v"), P()), hits, (AH, H0),
       bugs=[("hub-norm-local", ["missing-collective"]), ("authority-slice-no-reduce", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. batched personalised PageRank with a hand-written ring reduce-scatter.


def ppr_batch(a, pers, r0):
    deg = a.sum(1)

    def step(_, r):
        x = r * safe_inv(deg)
        dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0), 1, keepdims=True)
        return (1 - DAMP) * pers + DAMP * (x @ a + dang * pers)
    return lax.fori_loop(0, 12, step, r0)


def ppr_ring(bug):
    def f(a_loc, pers, r_loc):
        n, nl = 4, a_loc.shape[0]
        me = idx("v")
        deg = a_loc.sum(1)
        perm = [(i, (i - 1) % n) for i in range(n)] if bug == "ring-step-left" else \
            [(i, (i + 1) % n) for i in range(n)]

        def chunk(part, c):
            return lax.dynamic_slice_in_dim(part, c * nl, nl, 1)

        def step(_, r):
            x = r * safe_inv(deg)
            part = x @ a_loc  # (b, N) partial over my source rows
            acc = chunk(part, (me - 1) % n)
            for s in range(1, n):
                acc = lax.ppermute(acc, "v", perm) + chunk(part, (me - 1 - s) % n)
            dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0), 1, keepdims=True)
            if bug != "dangling-not-psummed":
                dang = psum(dang, "v")
            return (1 - DAMP) * pers + DAMP * (acc + dang * pers)
        return lax.fori_loop(0, 12, step, r_loc)
    return f


PB = rng.dirichlet(np.ones(N) * 0.3, size=4).astype(np.float32)
C.smap("s.ppr_batch_ring_reduce_scatter.b2xv4", {"b": 2, "v": 4}, ppr_ring,
       (P("v"), P("b", "v"), P("b", "v")), P("b", "v"), ppr_batch, (A, PB, np.tile(R0, (4, 1))),
       bugs=[("ring-step-left", ["wrong-permutation"]), ("dangling-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 13. push-style PageRank with messages exchanged by all_to_all: edges owned
#     by the source's device and bucketed on the host by the destination's
#     device (padded with weight 0), global vertex ids in the buckets.
NV = 4


def bucket_edges(a, nb):
    s, d = np.nonzero(a)
    nl = a.shape[0] // nb
    k = max(np.sum((s // nl == i) & (d // nl == j)) for i in range(nb) for j in range(nb))
    S = np.zeros((nb, nb, k), np.int32)
    D = np.zeros((nb, nb, k), np.int32)
    W = np.zeros((nb, nb, k), np.float32)
    for i in range(nb):
        for j in range(nb):
            e = np.nonzero((s // nl == i) & (d // nl == j))[0]
            S[i, j] = i * nl
            D[i, j] = j * nl
            S[i, j, :len(e)], D[i, j, :len(e)], W[i, j, :len(e)] = s[e], d[e], 1.0
    return S, D, W


ES, ED, EW = bucket_edges(A, NV)


def pr_push(src, dst, w, r0):
    n = r0.shape[0]
    src, dst, w = src.ravel(), dst.ravel(), w.ravel()
    deg = jax.ops.segment_sum(w, src, n)

    def step(_, r):
        x = r * safe_inv(deg)
        dang = jnp.sum(jnp.where(deg < 0.5, r, 0.0))
        return (1 - DAMP) / n + DAMP * (jax.ops.segment_sum(w * x[src], dst, n) + dang / n)
    return lax.fori_loop(0, 15, step, r0)


def pr_a2a(bug):
    def f(src, dst, w, r_loc):
        nl = r_loc.shape[0]
        n = nl * NV
        me = idx("v")
        src, dst, w = src[0], dst[0], w[0]  # (NV, K): my edges bucketed by the destination's device
        sl = src if bug == "src-without-offset" else src - me * nl
        deg = jax.ops.segment_sum(w.ravel(), sl.ravel(), nl)
        rdst = lax.all_to_all(dst, "v", 0, 0, tiled=True)
        if bug == "dst-not-exchanged":
            rdst = dst
        dl = rdst - me * nl

        def step(_, r):
            x = r * safe_inv(deg)
            msg = w * x[sl]
            got = lax.all_to_all(msg, "v", 0, 0, tiled=True)
            y = jax.ops.segment_sum(got.ravel(), dl.ravel(), nl)
            dang = psum(jnp.sum(jnp.where(deg < 0.5, r, 0.0)), "v")
            return (1 - DAMP) / n + DAMP * (y + dang / n)
        return lax.fori_loop(0, 15, step, r_loc)
    return f


C.smap("s.pagerank_push_all_to_all.v4", {"v": 4}, pr_a2a, (P("v"), P("v"), P("v"), P("v")), P("v"), pr_push,
       (ES, ED, EW, R0), bugs=[("src-without-offset", ["wrong-offset"]), ("dst-not-exchanged", ["missing-collective"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.pagerank_rows.v8", {"v": 8}, (P("v"), P("v")), P("v"), pagerank, (A, R0))
C.gspmd("g.triangles_2d.r2xc4", {"r": 2, "c": 4}, (P("r", "c"),), (P("r"), P()), triangles, (AU8,))
C.gspmd("g.hits_cols.v4", {"v": 4}, (P(None, "v"), P()), (P(), P()), hits, (AH, H0))
C.gspmd("g.bellman_ford_edges.e8", {"e": 8}, (P("e"),) * 3 + (P(),), P(), bellman_ford, (BS, BD, BW, D0))
C.gspmd("g.components_while.e8", {"e": 8}, (P("e"), P("e")), P(), components, (SS, SD))
C.gspmd("g.kcore_rows.v4", {"v": 4}, (P("v"), P()), (P("v"), P(), P(), P()), kcore, (AK, np.float32(3)))

MISS_IDX = ("edge ids are data: on random integers the programs index out of bounds (segment ops drop, gathers clamp) so execution decides nothing, and the rules do not relate segment_min / segment_sum at ids offset by the device")
C.known_miss("s.bellman_ford_dst_blocks_segment_min.v4.bug.no-owner-offset", MISS_IDX)
C.known_miss("s.bellman_ford_dst_blocks_segment_min.v4.bug.next-block-offset", MISS_IDX)
C.known_miss("s.pagerank_push_all_to_all.v4.bug.dst-not-exchanged", MISS_IDX)
MISS_BFS = ("each g group's while_loop stops on its own flag (pmax over v only), so the witness cannot run the distributed program (its groups take different control paths) and the rules stop at the loop's carry")
C.known_miss("s.bfs_multiroot_frontier.g2xv4.bug.offset-from-g", MISS_BFS)
C.finish()
