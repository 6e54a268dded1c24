"""samples/fresh43: a 43rd batch of programs as a user writes them, on the theme of recommendation and tabular models under sharding in current JAX (DLRM-style embedding tables sharded row-wise, column-wise, table-wise and in the TorchRec hybrids, multi-hot bags with per-bag lengths, DCN cross networks, factorization machines, wide & deep, training steps with jax.grad and optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. table-wise sharding (ep4, 8 tables stacked, 2 per device): every device
    pools its own tables' multi-hot bags (mean by per-bag lengths) for the
    whole batch (ids passed replicated, the device's table columns taken
    with jnp.take at me * 2 + k), the pooled embeddings all_to_all'd
    (split batch, concat tables) so each device holds its batch rows with
    all tables, then the DLRM dot interaction (strict lower triangle) with
    the dense features. Bugs: the table-to-device mapping strided
    (tables k * 4 + me: ids of other tables), mean over the padded bag width
    instead of the lengths.
 2. row-wise sharding with per-sample weights (tp4, 64 rows, 16 per device):
    ids replicated, masked lookups at the device's row offset, weighted sum
    pooling of the valid positions, the partial pools psum_scatter'd onto
    the batch owners. Bugs: the row offset me * n_devices instead of
    me * rows, no reduce-scatter (the local partial sliced at the batch
    block).
 3. TorchRec table-wise-column-wise (dp2 x tp2 x ep2): 4 tables, tables over
    ep and embedding columns over tp, ids over dp (and their tables over ep);
    two tiled all_to_alls (over tp: split batch, concat columns; over ep:
    split batch, concat tables) give each device its eighth of the batch
    with every table's whole rows. Bugs: the two all_to_alls in the wrong
    axis order (ep first), the first all_to_all over dp.
 4. a DLRM-lite training step (dp2 x tp4, check_vma=True): the table's rows
    over tp, ids in padded bags with lengths over dp, mean pooling as psum of
    masked sums / length, a bottom layer and the dot + linear top, BCE
    pmean'd over dp, jax.value_and_grad, optax.sgd with momentum on the
    shards. Bugs: the row offset from the dp index, mean divided by the
    local count of hits before the psum.
 5. TorchRec row-wise with input and output distribution (ep4): ids over
    ep bucketed by owner (id // rows, -1 elsewhere), all_to_all'd to the
    owners, looked up at the owner's offset, sum-pooled per (source, bag),
    all_to_all'd back and summed over owners, mean by lengths. Bugs: the
    owner subtracting the source's offset, the owner dividing by its own
    hit count (mean of partial means).
 6. DCN v1 (vector cross) x 3 and a low-rank DCN-v2 layer with the features
    over tp (dp2 x tp4): x_l . w psum'd, V^T x psum'd to the replicated rank,
    U's rows local, the logit's dot psum'd. Bugs: a cross dot not psum'd,
    the psum after U (summing different feature blocks), the logit pmean'd.
 7. a factorization machine with the factor dim over tp (dp2 x tp4): the
    sum-square trick per factor local, the per-example interaction psum'd
    over factors, linear term and bias added after. Bugs: linear term
    inside the psum, the psum taken on x V before squaring.
 8. wide & deep training step (dp2 x tp4, check_vma=True): a wide linear
    model over hashed crosses ((31 a + 7 b + 3) mod 64, a mod 64, b mod 64)
    with its weights' rows over tp (masked lookups psum'd), a replicated
    deep embedding, a column-parallel hidden layer and row-parallel output
    psum'd; BCE pmean'd over dp; optax.multi_transform (sgd on the wide
    part, adam on the deep). Bugs: the hash taken mod the local row count,
    the loss psum'd over dp.
 9. DIN-style target attention over a user's behaviour history with the
    history over sp (dp2 x sp4): an attention MLP on [h, t, h * t], masked
    at the history length at global positions, softmax by pmax / psum,
    weighted sum psum'd. Bugs: the maximum not pmax'd, positions local.
10. the backward of a mean-pooled EmbeddingBag written by hand for a
    row-sharded table (tp4): d pooled / length spread to the bag's ids,
    jax.ops.segment_sum at the local row (other rows dropped), SGD. Bugs:
    segment ids without the offset, the per-bag count of local hits as
    the divisor.
11. TorchRec table-row-wise (node2 x local4): 4 tables over node, their rows
    over local, masked lookups, mean pooling, psum_scatter over local (batch)
    and all_gather over node (tables). Bugs: the table slot from the local
    index, mean over the local hit count.
12. a CSR EmbeddingBag (flat ids and bag offsets, as torch's
    nn.EmbeddingBag takes them) over a bf16 table with rows over tp4: bag
    ids from the offsets by searchsorted, lookups by
    tab.at[loc].get(mode="fill", fill_value=0, wrap_negative_indices=False)
    at the local row (no explicit mask), segment_sum in f32, psum'd,
    divided by the bag sizes (offset differences). Bugs: the fill lookup at
    global ids (no offset), the divisor the device's own hit count per bag
    (at least 1), not the bag size, and jnp.take(mode="fill") -- which
    wraps the negative local ids of rows below the device's block to the
    end of the shard before filling (this was the first draft's "correct"
    body: its numerics showed it, so it became a bug variant).
GSPMD pairs: 13. the DLRM-lite training step of 4 with the table's rows over
tp and the batch over dp; 14. a factorization machine trained by
optax.adam (two steps) with V's factors over tp; 15. the table-wise
pooling and interaction of 1 with the stacked tables over ep and the output
batch over ep (the partitioner's all-to-all); 16. the wide & deep step of 8;
17. jax.value_and_grad of the DCN of 6 with the features over tp; 18. the
CSR EmbeddingBag of 12 with the bf16 table's rows over tp.
Integer inputs are valid: ids in range, every bag length >= 1 (a padded bag
has at least one valid id), history lengths >= 1, CSR offsets sorted
with no empty bag.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh43.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh43.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh43.py"
C = Corpus("samples/fresh43", SCRIPT, "samples/gen/run_fresh43.sh", sys.argv[1:])
rng, R, I = seeded(4343)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
NEG = -1e30


def bag_mask(ids, lens):
    return jnp.arange(ids.shape[-1]) < lens[..., None]


def bag_pool(table, ids, lens, mean=True):
    """EmbeddingBag of padded bags ids (B, L) with lengths (B,)."""
    e = jnp.take(table, ids, axis=0)
    s = jnp.einsum("bld,bl->bd", e, bag_mask(ids, lens).astype(table.dtype))
    return s / lens[:, None].astype(table.dtype) if mean else s


def pool_tables(tabs, ids, lens):
    """tabs (T, R, D), ids (B, T, L), lens (B, T) -> (B, T, D)."""
    return jax.vmap(bag_pool, in_axes=(0, 1, 1), out_axes=1)(tabs, ids, lens)


def dot_interaction(x, pooled):
    z = jnp.concatenate([x[:, None], pooled], 1)
    zz = jnp.einsum("bfd,bgd->bfg", z, z)
    iu, ju = np.tril_indices(z.shape[1], -1)
    return jnp.concatenate([x, zz[:, iu, ju]], 1)


def lens_of(*shape, L):
    return I(1, L + 1, *shape)


# ---------------------------------------------------------------------------
# 1. table-wise, pooled embeddings all_to_all'd back to the batch owners.
NT1, R1, D1, B1, L1 = 8, 16, 8, 16, 3


def tw_ref(tabs, ids, lens, x):
    return dot_interaction(x, pool_tables(tabs, ids, lens))


def tw_a2a(bug):
    def f(tabs, ids, lens, x):
        me, k = idx("ep"), tabs.shape[0]
        cols = jnp.arange(k) * 4 + me if bug == "table-map-strided" else me * k + jnp.arange(k)
        my_ids, my_lens = jnp.take(ids, cols, axis=1), jnp.take(lens, cols, axis=1)
        if bug == "mean-over-padded-width":
            pooled = jax.vmap(lambda t, i, l: bag_pool(t, i, l, mean=False) / i.shape[-1],
                              in_axes=(0, 1, 1), out_axes=1)(tabs, my_ids, my_lens)
        else:
            pooled = pool_tables(tabs, my_ids, my_lens)  # (B, k, D)
        pooled = lax.all_to_all(pooled, "ep", 0, 1, tiled=True)  # (B / 4, T, D)
        return dot_interaction(x, pooled)
    return f


ARGS1 = (R(NT1, R1, D1, scale=0.5), I(0, R1, B1, NT1, L1), lens_of(B1, NT1, L=L1), R(B1, D1))
C.smap("s.tablewise_pooled_alltoall_dot.ep4", {"ep": 4}, tw_a2a, (P("ep"), P(), P(), P("ep")), P("ep"),
       tw_ref, ARGS1,
       bugs=[("table-map-strided", ["wrong-offset"]), ("mean-over-padded-width", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. row-wise with per-sample weights, reduce-scattered onto batch owners.
R2, D2, B2, L2 = 64, 8, 8, 4


def rw_weighted_ref(tab, ids, lens, w):
    e = tab[ids]
    return jnp.sum(e * jnp.where(bag_mask(ids, lens), w, 0.0)[..., None], axis=1)


def rw_rs(bug):
    def f(tab, ids, lens, w):
        rl, me = tab.shape[0], idx("tp")
        off = me * 4 if bug == "row-offset-times-devices" else me * rl
        loc = ids - off
        hit = (loc >= 0) & (loc < rl) & bag_mask(ids, lens)
        e = tab[jnp.clip(loc, 0, rl - 1)]
        part = jnp.einsum("bld,bl->bd", e, jnp.where(hit, w, 0.0))
        if bug == "no-reduce-scatter":
            return lax.dynamic_slice_in_dim(part, me * (ids.shape[0] // 4), ids.shape[0] // 4)
        return lax.psum_scatter(part, "tp", scatter_dimension=0, tiled=True)
    return f


C.smap("s.rowwise_weighted_bag_reduce_scatter.tp4", {"tp": 4}, rw_rs, (P("tp"), P(), P(), P()), P("tp"),
       rw_weighted_ref, (R(R2, D2), I(0, R2, B2, L2), lens_of(B2, L=L2), np.abs(R(B2, L2)) + 0.1),
       bugs=[("row-offset-times-devices", ["wrong-offset"]), ("no-reduce-scatter", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 3. table-wise-column-wise on dp2 x tp2 x ep2, two all_to_alls.
NT3, R3, D3, B3, L3 = 4, 16, 8, 16, 3


def twcw(bug):
    def f(tabs, ids, lens):
        pooled = pool_tables(tabs, ids, lens)  # (B/2, 2, D/2)
        first, second = ("ep", "tp") if bug == "a2a-axis-order" else (("dp" if bug == "first-a2a-over-dp" else "tp"), "ep")
        pooled = lax.all_to_all(pooled, first, 0, 2, tiled=True)  # columns
        return lax.all_to_all(pooled, second, 0, 1, tiled=True)  # tables
    return f


C.smap("s.table_column_wise_two_alltoall.dp2xtp2xep2", {"dp": 2, "tp": 2, "ep": 2}, twcw,
       (P("ep", None, "tp"), P("dp", "ep"), P("dp", "ep")), P(("dp", "tp", "ep")), pool_tables,
       (R(NT3, R3, D3), I(0, R3, B3, NT3, L3), lens_of(B3, NT3, L=L3)),
       bugs=[("a2a-axis-order", ["wrong-axis"]), ("first-a2a-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 4. DLRM-lite training step, rows over tp, batch over dp, sgd momentum.
R4, D4, B4, L4, F4 = 32, 8, 8, 4, 4
OPT4 = optax.sgd(0.1, momentum=0.9)


def dlrm_logit(p, pooled, x):
    bot = jax.nn.relu(x @ p["Wb"])
    feat = jnp.concatenate([pooled, bot, jnp.sum(pooled * bot, -1, keepdims=True)], -1)
    return feat @ p["wt"] + p["bt"]


def bce(logit, y):
    return optax.sigmoid_binary_cross_entropy(logit, y)


def dlrm_step_ref(p, s, ids, lens, x, y):
    def loss_fn(p):
        return jnp.mean(bce(dlrm_logit(p, bag_pool(p["tab"], ids, lens), x), y))
    loss, g = jax.value_and_grad(loss_fn)(p)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def dlrm_step(bug):
    def f(p, s, ids, lens, x, y):
        def loss_fn(p):
            tab = p["tab"]
            rl = tab.shape[0]
            off = (idx("dp") if bug == "row-offset-from-dp" else idx("tp")) * rl
            loc = ids - off
            hit = (loc >= 0) & (loc < rl) & bag_mask(ids, lens)
            e = jnp.take(tab, jnp.clip(loc, 0, rl - 1), axis=0)
            part = jnp.sum(e * hit[..., None], 1)
            if bug == "mean-local-count":
                cnt = jnp.maximum(hit.sum(1), 1).astype(jnp.float32)
                pooled = psum(part / cnt[:, None], "tp")
            else:
                pooled = psum(part, "tp") / lens[:, None].astype(jnp.float32)
            return pmean(jnp.mean(bce(dlrm_logit(p, pooled, x), y)), "dp")
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return f


P4 = {"tab": R(R4, D4, scale=0.5), "Wb": R(F4, D4, scale=0.5), "wt": R(2 * D4 + 1, scale=0.3), "bt": np.float32(0.1)}
S4 = OPT4.init(P4)
S4 = jax.tree.map(lambda a: np.asarray(a) + 0.01, S4)  # a momentum already running
SPEC4 = {"tab": P("tp"), "Wb": P(), "wt": P(), "bt": P()}
SS4 = state_specs(S4, SPEC4)
D4ARGS = (I(0, R4, B4, L4), lens_of(B4, L=L4), R(B4, F4), I(0, 2, B4).astype(np.float32))
C.smap("s.dlrm_rowwise_train_step_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, dlrm_step,
       (SPEC4, SS4, P("dp"), P("dp"), P("dp"), P("dp")), (SPEC4, SS4, P()), dlrm_step_ref,
       (P4, S4) + D4ARGS, check_vma=True,
       bugs=[("row-offset-from-dp", ["wrong-offset"]), ("mean-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. row-wise with input / output distribution by all_to_all.
R5, D5, B5, L5 = 64, 8, 16, 4


def rw_dist(bug):
    def f(tab, ids, lens):
        n, rl, me = 4, tab.shape[0], idx("ep")
        valid = bag_mask(ids, lens)
        owner = ids // rl
        bk = jnp.where((owner[None] == jnp.arange(n)[:, None, None]) & valid[None], ids[None], -1)
        recv = lax.all_to_all(bk, "ep", 0, 0, tiled=True)  # [source] (n, b, L)
        hit = recv >= 0
        if bug == "owner-offset-of-source":
            loc = recv - jnp.arange(n)[:, None, None] * rl
        else:
            loc = recv - me * rl
        e = jnp.take(tab, jnp.clip(loc, 0, rl - 1), axis=0) * hit[..., None]
        part = e.sum(2)  # (n, b, D)
        if bug == "owner-mean-of-hits":
            part = part / jnp.maximum(hit.sum(2), 1)[..., None].astype(part.dtype)
        back = lax.all_to_all(part, "ep", 0, 0, tiled=True)  # [owner]
        s = back.sum(0)
        return s if bug == "owner-mean-of-hits" else s / lens[:, None].astype(s.dtype)
    return f


C.smap("s.rowwise_input_output_dist_alltoall.ep4", {"ep": 4}, rw_dist, (P("ep"), P("ep"), P("ep")), P("ep"),
       bag_pool, (R(R5, D5), I(0, R5, B5, L5), lens_of(B5, L=L5)),
       bugs=[("owner-offset-of-source", ["wrong-offset"]), ("owner-mean-of-hits", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. DCN v1 x 3 and a low-rank DCN-v2 layer, features over tp.
B6, D6, RK6 = 8, 16, 4


def dcn_ref(x0, ws, bs, U, V, bl, wout):
    x = x0
    for l in range(ws.shape[0]):
        x = x0 * (x @ ws[l])[:, None] + bs[l] + x
    x = x0 * ((x @ V) @ U.T + bl) + x
    return x @ wout


def dcn_tp(bug):
    def f(x0, ws, bs, U, V, bl, wout):
        x = x0
        for l in range(ws.shape[0]):
            d = x @ ws[l]
            if not (bug == "cross-dot-not-psummed" and l == 1):
                d = psum(d, "tp")
            x = x0 * d[:, None] + bs[l] + x
        if bug == "psum-after-U":
            x = x0 * (psum((x @ V) @ U.T, "tp") + bl) + x
        else:
            x = x0 * (psum(x @ V, "tp") @ U.T + bl) + x
        return (pmean if bug == "logit-pmean" else psum)(x @ wout, "tp")
    return f


ARGS6 = (R(B6, D6, scale=0.7), R(3, D6, scale=0.25), R(3, D6, scale=0.1), R(D6, RK6, scale=0.3),
         R(D6, RK6, scale=0.3), R(D6, scale=0.1), R(D6, scale=0.3))
SP6 = (P("dp", "tp"), P(None, "tp"), P(None, "tp"), P("tp"), P("tp"), P("tp"), P("tp"))
C.smap("s.dcn_v1_lowrank_v2_features_tp.dp2xtp4", {"dp": 2, "tp": 4}, dcn_tp, SP6, P("dp"), dcn_ref, ARGS6,
       bugs=[("cross-dot-not-psummed", ["missing-collective"]), ("psum-after-U", ["wrong-collective-op"]),
             ("logit-pmean", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 7. factorization machine, factor dim over tp.
B7, N7, K7 = 8, 16, 8


def fm_ref(x, V, w, w0):
    xv = x @ V
    inter = 0.5 * jnp.sum(xv * xv - (x * x) @ (V * V), -1)
    return inter + x @ w + w0


def fm_tp(bug):
    def f(x, V, w, w0):
        if bug == "psum-before-square":
            xv = psum(x @ V, "tp")
            inter = psum(0.5 * jnp.sum(xv * xv - (x * x) @ (V * V), -1), "tp")
        else:
            xv = x @ V
            inter = 0.5 * jnp.sum(xv * xv - (x * x) @ (V * V), -1)
            if bug == "linear-inside-psum":
                return psum(inter + x @ w, "tp") + w0
            inter = psum(inter, "tp")
        return inter + x @ w + w0
    return f


X7 = R(B7, N7) * (rng.random((B7, N7)) < 0.4)  # sparse-ish one/multi-hot-like values
C.smap("s.fm_factor_dim_tp.dp2xtp4", {"dp": 2, "tp": 4}, fm_tp, (P("dp"), P(None, "tp"), P(), P()), P("dp"),
       fm_ref, (X7.astype(np.float32), R(N7, K7, scale=0.3), R(N7, scale=0.3), np.float32(-0.2)),
       bugs=[("linear-inside-psum", ["wrong-scale"]), ("psum-before-square", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 8. wide & deep training step, wide rows over tp, deep hidden over tp.
HW8, NE8, DE8, F8, H8, B8 = 64, 32, 8, 4, 16, 8
OPT8 = optax.multi_transform({"wide": optax.sgd(0.5), "deep": optax.adam(1e-2)},
                             {"wide": "wide", "emb": "deep", "W1": "deep", "b1": "deep", "W2": "deep", "b2": "deep"})


def crosses(cat, mod):
    a, b = cat[:, 0], cat[:, 1]
    return jnp.stack([(31 * a + 7 * b + 3) % mod, a % mod, b % mod], 1)


def wd_logit_ref(p, cat, x):
    wide = jnp.sum(p["wide"][crosses(cat, HW8)], 1)
    h = jnp.concatenate([p["emb"][cat].reshape(cat.shape[0], -1), x], 1)
    h = jax.nn.relu(h @ p["W1"] + p["b1"])
    return wide + h @ p["W2"] + p["b2"]


def wd_step_ref(p, s, cat, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean(bce(wd_logit_ref(p, cat, x), y)))(p)
    u, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, u), s, loss


def wd_step(bug):
    def f(p, s, cat, x, y):
        def loss_fn(p):
            rl = p["wide"].shape[0]
            hs = crosses(cat, rl if bug == "hash-mod-local-rows" else HW8)
            loc = hs - idx("tp") * rl
            hit = (loc >= 0) & (loc < rl)
            wide = psum(jnp.sum(jnp.where(hit, p["wide"][jnp.clip(loc, 0, rl - 1)], 0.0), 1), "tp")
            h = jnp.concatenate([p["emb"][cat].reshape(cat.shape[0], -1), x], 1)
            h = jax.nn.relu(h @ p["W1"] + p["b1"])
            logit = wide + psum(h @ p["W2"], "tp") + p["b2"]
            l = jnp.mean(bce(logit, y))
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, loss
    return f


P8 = {"wide": R(HW8, scale=0.2), "emb": R(NE8, DE8, scale=0.5), "W1": R(2 * DE8 + F8, H8, scale=0.3),
      "b1": R(H8, scale=0.1), "W2": R(H8, scale=0.3), "b2": np.float32(0.0)}
S8 = OPT8.init(P8)
SPEC8 = {"wide": P("tp"), "emb": P(), "W1": P(None, "tp"), "b1": P("tp"), "W2": P("tp"), "b2": P()}
SS8 = state_specs(S8, SPEC8)
D8ARGS = (I(0, NE8, B8, 2), R(B8, F8), I(0, 2, B8).astype(np.float32))
C.smap("s.wide_and_deep_step_multi_transform.dp2xtp4", {"dp": 2, "tp": 4}, wd_step,
       (SPEC8, SS8, P("dp"), P("dp"), P("dp")), (SPEC8, SS8, P()), wd_step_ref, (P8, S8) + D8ARGS, check_vma=True,
       bugs=[("hash-mod-local-rows", ["wrong-offset"]), ("loss-psum-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 9. DIN target attention, behaviour history over sp.
B9, L9, D9, A9 = 4, 16, 8, 8


def din_scores(h, t, Wa, va):
    tt = jnp.broadcast_to(t[:, None], h.shape)
    return jnp.tanh(jnp.concatenate([h, tt, h * tt], -1) @ Wa) @ va


def din_ref(h, hlen, t, Wa, va):
    s = jnp.where(bag_mask(h[..., 0], hlen), din_scores(h, t, Wa, va), NEG)
    return jnp.einsum("bl,bld->bd", jax.nn.softmax(s, -1), h)


def din_sp(bug):
    def f(h, hlen, t, Wa, va):
        ll = h.shape[1]
        pos = jnp.arange(ll) + (0 if bug == "positions-local" else idx("sp") * ll)
        ok = pos[None] < hlen[:, None]
        s = jnp.where(ok, din_scores(h, t, Wa, va), NEG)
        m = jnp.max(s, -1, keepdims=True)
        if bug != "max-not-pmaxed":
            m = pmax(m, "sp")
        ex = jnp.exp(s - m) * ok
        return psum(jnp.einsum("bl,bld->bd", ex, h), "sp") / psum(jnp.sum(ex, -1, keepdims=True), "sp")
    return f


C.smap("s.din_target_attention_history_sp.dp2xsp4", {"dp": 2, "sp": 4}, din_sp,
       (P("dp", "sp"), P("dp"), P("dp"), P(), P()), P("dp"), din_ref,
       (R(B9, L9, D9), np.array([16, 7, 12, 3], np.int32), R(B9, D9), R(3 * D9, A9, scale=0.4), R(A9, scale=2.0)),
       bugs=[("max-not-pmaxed", ["missing-collective"]), ("positions-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. hand-written EmbeddingBag backward (mean) with segment_sum, rows over tp.
R10, D10, B10, L10 = 32, 8, 8, 4
LR10 = 0.1


def bag_sgd_ref(tab, ids, lens, dpool):
    g = jax.grad(lambda t: jnp.sum(bag_pool(t, ids, lens) * dpool))(tab)
    return tab - LR10 * g


def bag_sgd(bug):
    def f(tab, ids, lens, dpool):
        rl = tab.shape[0]
        loc = ids - idx("tp") * rl
        hit = (loc >= 0) & (loc < rl) & bag_mask(ids, lens)
        if bug == "divide-by-local-hits":
            cnt = jnp.maximum(hit.sum(1), 1)
        else:
            cnt = lens
        coef = hit / cnt[:, None].astype(jnp.float32)  # (B, L)
        contrib = (dpool[:, None, :] * coef[..., None]).reshape(-1, tab.shape[1])
        seg = jnp.where(hit, ids if bug == "segment-ids-global" else loc, rl).reshape(-1)
        g = jax.ops.segment_sum(contrib, seg, num_segments=rl)
        return tab - LR10 * g
    return f


C.smap("s.embbag_mean_backward_segment_sum_sgd.tp4", {"tp": 4}, bag_sgd, (P("tp"), P(), P(), P()), P("tp"),
       bag_sgd_ref, (R(R10, D10), I(0, R10, B10, L10), lens_of(B10, L=L10), R(B10, D10)),
       bugs=[("segment-ids-global", ["wrong-offset"]), ("divide-by-local-hits", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. table-row-wise: tables over node, rows over local.
NT11, R11, D11, B11, L11 = 4, 32, 8, 8, 3


def twrw(bug):
    def f(tabs, ids, lens):
        k, rl = tabs.shape[0], tabs.shape[1]
        ni, li = idx("node"), idx("local")
        slot = (li % 2) if bug == "table-slot-from-local" else ni
        cols = slot * k + jnp.arange(k)
        my_ids, my_lens = jnp.take(ids, cols, axis=1), jnp.take(lens, cols, axis=1)  # (B, k, L), (B, k)
        loc = my_ids - li * rl
        hit = (loc >= 0) & (loc < rl) & bag_mask(my_ids, my_lens)
        e = jax.vmap(lambda t, i: jnp.take(t, i, axis=0), in_axes=(0, 1), out_axes=1)(tabs, jnp.clip(loc, 0, rl - 1))
        part = jnp.einsum("bkld,bkl->bkd", e, hit.astype(e.dtype))
        if bug == "mean-local-count":
            part = part / jnp.maximum(hit.sum(-1), 1)[..., None].astype(e.dtype)
        else:
            part = part / my_lens[..., None].astype(e.dtype)
        rs = lax.psum_scatter(part, "local", scatter_dimension=0, tiled=True)
        return lax.all_gather(rs, "node", axis=1, tiled=True)
    return f


C.smap("s.table_row_wise_rs_local_ag_node.node2xlocal4", {"node": 2, "local": 4}, twrw,
       (P("node", "local"), P(), P()), P("local"), pool_tables,
       (R(NT11, R11, D11), I(0, R11, B11, NT11, L11), lens_of(B11, NT11, L=L11)),
       bugs=[("table-slot-from-local", ["wrong-offset"]), ("mean-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. a CSR EmbeddingBag (flat ids and bag offsets, as torch's
#     nn.EmbeddingBag takes them) over a bf16 table whose rows are over tp:
#     bag ids from the offsets by searchsorted, lookups by jnp.take with
#     mode="fill" (0 outside the device's rows), f32 segment_sum, psum'd,
#     divided by the bag sizes from the offsets' differences.
R12, D12, B12, N12 = 64, 8, 8, 24


def csr_bag_ref(tab, ids, offsets):
    bag = jnp.searchsorted(offsets, jnp.arange(ids.shape[0]), side="right") - 1
    e = jnp.take(tab, ids, axis=0).astype(jnp.float32)
    s = jax.ops.segment_sum(e, bag, num_segments=offsets.shape[0] - 1)
    return s / jnp.diff(offsets)[:, None].astype(jnp.float32)


def csr_bag(bug):
    def f(tab, ids, offsets):
        rl = tab.shape[0]
        bag = jnp.searchsorted(offsets, jnp.arange(ids.shape[0]), side="right") - 1
        loc = ids if bug == "fill-lookup-global-ids" else ids - idx("tp") * rl
        if bug == "fill-take-wraps-negative":  # jnp.take wraps negative ids before the fill
            e = jnp.take(tab, loc, axis=0, mode="fill", fill_value=0).astype(jnp.float32)
        else:
            e = tab.at[loc].get(mode="fill", fill_value=0, wrap_negative_indices=False).astype(jnp.float32)
        s = psum(jax.ops.segment_sum(e, bag, num_segments=offsets.shape[0] - 1), "tp")
        if bug == "count-local-hits":
            hit = ((loc >= 0) & (loc < rl)).astype(jnp.float32)
            cnt = jnp.maximum(jax.ops.segment_sum(hit, bag, num_segments=offsets.shape[0] - 1), 1.0)
            return s / cnt[:, None]
        return s / jnp.diff(offsets)[:, None].astype(jnp.float32)
    return f


OFF12 = np.concatenate([[0], np.sort(rng.choice(np.arange(1, N12), B12 - 1, replace=False)), [N12]]).astype(np.int32)
ARGS12 = (R(R12, D12).astype(jnp.bfloat16), I(0, R12, N12), OFF12)
C.smap("s.csr_embedding_bag_fill_take_bf16.tp4", {"tp": 4}, csr_bag, (P("tp"), P(), P()), P(), csr_bag_ref, ARGS12,
       bugs=[("fill-lookup-global-ids", ["wrong-offset"]), ("count-local-hits", ["wrong-scale"]),
             ("fill-take-wraps-negative", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 13. the DLRM-lite step, table rows over tp, batch over dp.
C.gspmd("g.dlrm_rowwise_train_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC4, SS4, P("dp"), P("dp"), P("dp"), P("dp")),
        (SPEC4, SS4, P()), dlrm_step_ref, (P4, S4) + D4ARGS)

# 14. an FM trained by optax.adam, factors over tp.
OPT13 = optax.adam(5e-2)


def fm_adam(p, s, x, y):
    def loss_fn(p):
        return jnp.mean(bce(fm_ref(x, p["V"], p["w"], p["w0"]), y))
    for _ in range(2):
        loss, g = jax.value_and_grad(loss_fn)(p)
        u, s = OPT13.update(g, s, p)
        p = optax.apply_updates(p, u)
    return p, s, loss


P13 = {"V": R(N7, K7, scale=0.3), "w": R(N7, scale=0.3), "w0": np.float32(0.0)}
S13 = OPT13.init(P13)
SPEC13 = {"V": P(None, "tp"), "w": P(), "w0": P()}
SS13 = state_specs(S13, SPEC13)
C.gspmd("g.fm_adam_two_steps_factors_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC13, SS13, P("dp"), P("dp")),
        (SPEC13, SS13, P()), fm_adam, (P13, S13, X7.astype(np.float32), I(0, 2, B7).astype(np.float32)))

# 15. the table-wise pooling + interaction of 1, tables over ep, batch out over ep.
C.gspmd("g.tablewise_pool_interaction.ep4", {"ep": 4}, (P("ep"), P(), P(), P("ep")), P("ep"), tw_ref, ARGS1)

# 16. the wide & deep step of 8.
C.gspmd("g.wide_and_deep_step.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC8, SS8, P("dp"), P("dp"), P("dp")),
        (SPEC8, SS8, P()), wd_step_ref, (P8, S8) + D8ARGS)


# 17. value_and_grad of the DCN of 6 (mean squared error to a target).
def dcn_vg(x0, ws, bs, U, V, bl, wout, tgt):
    return jax.value_and_grad(lambda *a: jnp.mean(jnp.square(dcn_ref(x0, *a) - tgt)), argnums=(0, 1, 2, 3, 4, 5))(
        ws, bs, U, V, bl, wout)


C.gspmd("g.dcn_value_and_grad_features_tp.dp2xtp4", {"dp": 2, "tp": 4}, SP6 + (P("dp"),),
        (P(), (P(None, "tp"), P(None, "tp"), P("tp"), P("tp"), P("tp"), P("tp"))), dcn_vg, ARGS6 + (R(B6),))

# 18. the CSR EmbeddingBag of 12 with the bf16 table's rows over tp.
C.gspmd("g.csr_embedding_bag_bf16_rows_tp.tp4", {"tp": 4}, (P("tp"), P(), P()), P(), csr_bag_ref, ARGS12)

C.finish()
