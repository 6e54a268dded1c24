"""samples/fresh123: a 123rd batch of programs as a user writes them, on the theme of correct programs that use collectives in unusual, redundant or roundabout ways (collectives over size-1 mesh axes, over tuples of axes, psum of a replicated value divided by axis_size, all_gather then this device's own slice, all_to_all round trips, psum_scatter + all_gather as an all-reduce, full-cycle and identity ppermutes, pmax / pmin of values equal everywhere, int32 / bool reductions, collectives inside cond / fori_loop / scan / while_loop, vmap of a shard_map with spmd_axis_name, partial-manual shard_map, psum of pytrees, broadcast-from-one by a masked psum, axis_index branches that agree), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every correct pair looks wrong op by op (a collective that does nothing, a
reduction of something already reduced, a value computed on every device and
then sliced, a communication that comes back where it started) and is right.
shard_map families (bugs after the colon):
 1. SGD step of a tanh layer on dp8 x tp1: the replicated bias "averaged" by
    psum over dp / axis_size(dp), the loss psum'd over ('dp','tp') at once,
    gradients psum'd over ('dp','tp'): bias divided by axis_size(tp) (= 1),
    gradients psum'd over the size-1 tp axis only.
 2. a causal EMA layer on dp1 x sp4: all_gather of the sequence over sp, the
    EMA by lax.scan over the whole sequence on every device (redundant), this
    device's block cut by dynamic_slice at axis_index(sp) * T_local:
    the block index taken from the size-1 dp axis, the all_gather over dp.
 3. Ulysses attention (dp2 x sp4): all_to_all heads <-> sequence, causal
    attention over the full sequence on a quarter of the heads, the inverse
    all_to_all back: the inverse concatenating on the head-dim axis instead
    of the head axis, both all_to_alls over dp instead of sp.
 4. ZeRO-1 momentum SGD (dp4 x tp2, the batch over ('dp','tp')): the flat
    gradient psum_scatter'd over ('dp','tp'), the sharded momentum updated,
    the update all_gather'd over ('dp','tp') (reduce-scatter + all-gather as
    an all-reduce): the all_gather over ('tp','dp') (chunks permuted), the
    loss psum'd over dp only.
 5. Nadaraya-Watson kernel smoothing on a ring (dp2 x sp4): an identity
    ppermute to "fetch" the own block, keys and values rotated by a full
    cycle in lax.fori_loop so the key block is back home for the residual:
    the cycle one step short, the values rotated the other way.
 6. evaluation metrics (dp4 x tp2, batch over ('dp','tp')): int32 counts by
    psum, "any NaN" by pmax of int flags, "all labels valid" by pmin, pmax /
    pmin of the replicated step and lr: counts psum'd over dp only, the
    logical or done with pmin.
 7. spectral-norm clipping (dp1 x tp4): power iteration in lax.while_loop
    whose predicate is a pmax of the (equal) counter, psum'd norms, then
    lax.cond on the global sigma: v normalised by its local norm, the cond on
    the local partial sigma.
 8. jax.vmap with spmd_axis_name='dp' over a shard_map'd per-example
    normalised MLP (tp4, dp2): RMS statistic psum'd over tp divided by
    H_local * axis_size(tp): divided by H_local only, by axis_size(dp).
 9. vocab-parallel cross-entropy in a shard_map with axis_names={'tp'}
    (partial manual; dp left to GSPMD) inside jit, the batch mean outside:
    the target logit gathered without the vocab offset, pmean'd instead of
    psum'd.
10. Adam step (pp1 x dp4): psum of the gradient pytree and of a (loss,
    count) tuple at once, the bias-corrected lr computed on dp device 0 and
    broadcast by a masked psum, the gradient norm by two formulas chosen by
    axis_index parity: the broadcast without the mask, the gradient psum
    over the size-1 pp axis.
GSPMD pairs (jax.jit with in/out shardings and with_sharding_constraint; correct):
11. MLP block on dp2 x tp1 x sp4; 12. vocab cross-entropy on dp8 x tp1;
13. matmul + reduction on a 2x2x2 mesh re-constrained between layouts;
14. a grad step on dp4 x fsdp1 x tp2.
Numerics: correct pairs agree at f32 rounding (about 1e-6 relative); bug
variants differ clearly on the seeded inputs (6.'s or-by-pmin only because
one device's logits hold a NaN: C.known_miss).
Run from the repository root: bash samples/gen/run_fresh123.sh [SUBSTR...]
"""
import os
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh123.sh)
from fresh_lib import Corpus, seeded, shardings, put, bug_lines  # noqa: E402
from scalify_jax import before_partitioning, after_partitioning, make_mesh, spec_view, leaf_names, relations_doc  # noqa: E402
from scalify_jax._export import (abstract, broadcast_specs, output_names, mesh_axes, _write, _json_lines,  # noqa: E402
                                 _merge_manifest, versions)

SCRIPT = "samples/gen/fresh123.py"
OUT = "samples/fresh123"
C = Corpus(OUT, SCRIPT, "samples/gen/run_fresh123.sh", sys.argv[1:])
rng, R, I = seeded(123123)
psum, pmax, pmin, pmean, idx, asize = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index, lax.axis_size


def global_family(family, mesh, make, in_specs, out_specs, fn, args, bugs=(), note=None):
    """Like Corpus.smap, for a distributed program that is a global function
    (vmap of a shard_map, partial-manual shard_map): make(b)(mesh) is it, run
    under jax.jit with the specs as in/out shardings; the relations come from
    the specs as for a shard_map pair."""
    m = make_mesh(mesh)
    axes = mesh_axes(m)
    abs_args = abstract(tuple(args))
    shapes = [a.shape for a in jax.tree_util.tree_leaves(abs_args)]
    names = leaf_names(fn, args)
    in_views = [spec_view(s, shp, axes) for s, shp in zip(broadcast_specs(tuple(in_specs), abs_args, "in"), shapes)]
    out_tree = jax.eval_shape(fn, *abs_args)
    out_views = [spec_view(s, o.shape, axes) for s, o in
                 zip(broadcast_specs(out_specs, out_tree, "out"), jax.tree_util.tree_leaves(out_tree))]
    for bug, kinds in [(None, None)] + list(bugs):
        name = family + (".bug." + bug if bug else "")
        if not C.wanted(name):
            continue
        print("==", name, flush=True)
        dist = make(bug)(m)
        base_lo = jax.jit(fn, keep_unused=True).lower(*abs_args)
        dj = jax.jit(dist, keep_unused=True, in_shardings=shardings(m, tuple(in_specs)),
                     out_shardings=shardings(m, out_specs))
        dist_lo = dj.lower(*abs_args)
        entry = {"name": name, "mesh": axes, "kind": "shard_map"}
        rel = name + ".relations.json"
        _write(os.path.join(OUT, rel), _json_lines(relations_doc(axes, names, in_views, output_names(out_tree),
                                                                  out_views)))
        for side, (text, pb) in (("baseline", before_partitioning(base_lo)),
                                 ("distributed", after_partitioning(dist_lo))):
            stem = name + (".baseline" if side == "baseline" else ".dist")
            _write(os.path.join(OUT, stem + ".hlo"), text)
            _write(os.path.join(OUT, stem + ".hlo.pb"), pb)
            entry[side] = {"hlo": stem + ".hlo", "pb": stem + ".hlo.pb"}
        entry["relations"] = rel
        entry["expected"] = "mismatch" if bug else "verified"
        entry["generator"] = dict(versions(), script="scalify_jax")
        _merge_manifest(OUT, entry)
        C.record(name, fn, args, lambda: dj(*put(m, args, in_specs)), note)
        if bug:
            C.extra[name]["bug"] = {"id": bug, "kinds": kinds, "locations": bug_lines(make, bug, SCRIPT)}


# ---------------------------------------------------------------------------
# 1. SGD step of a tanh layer on dp8 x tp1.
B1, D1, H1, LR1 = 32, 8, 4, 0.2


def sgd1_ref(w, b, x, y):
    def loss(w, b):
        return jnp.mean(jnp.square(jnp.tanh(x @ w + b) - y))
    l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
    return w - LR1 * gw, b - LR1 * gb, l


def sgd1_sm(bug):
    def f(w, b, x, y):
        # b is replicated: psum over dp then / axis_size(dp) gives b back
        b_avg = psum(b, "dp") / (asize("tp") if bug == "divide-by-tp-size" else asize("dp"))
        n = x.shape[0] * asize(("dp", "tp")) * y.shape[1]

        def local(w, b):
            return jnp.sum(jnp.square(jnp.tanh(x @ w + b) - y)) / n
        l, (gw, gb) = jax.value_and_grad(local, (0, 1))(w, b_avg)
        if bug == "grad-psum-tp-only":
            gw, gb = psum(gw, "tp"), psum(gb, "tp")
        else:
            gw, gb = psum(gw, ("dp", "tp")), psum(gb, ("dp", "tp"))
        return w - LR1 * gw, b_avg - LR1 * gb, psum(l, ("dp", "tp"))
    return f


C.smap("s.sgd_size1_tp_tuple_psum_bias_avg.dp8xtp1", {"dp": 8, "tp": 1}, sgd1_sm,
       (P(None, "tp"), P("tp"), P("dp"), P("dp", "tp")), (P(None, "tp"), P("tp"), P()), sgd1_ref,
       (R(D1, H1, scale=0.5), R(H1, scale=0.3), R(B1, D1), R(B1, H1, scale=0.5)),
       bugs=[("divide-by-tp-size", ["wrong-axis-size"]), ("grad-psum-tp-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. causal EMA over an all_gather'd sequence, own block by dynamic_slice.
B2, T2, D2 = 2, 32, 8


def ema_scan(x, a):
    def step(s, xt):
        s = a * s + (1.0 - a) * xt
        return s, s
    _, ys = lax.scan(step, jnp.zeros((x.shape[0], x.shape[2])), jnp.swapaxes(x, 0, 1))
    return jnp.swapaxes(ys, 0, 1)


def ema_ref(x, w, a):
    return x + jnp.tanh(ema_scan(x, a) @ w)


def ema_sm(bug):
    def f(x, w, a):
        tl = x.shape[1]
        xf = lax.all_gather(x, "dp" if bug == "gather-over-dp" else "sp", axis=1, tiled=True)
        ef = ema_scan(xf, a)  # the whole sequence, on every device
        me = idx("dp") if bug == "slice-index-dp" else idx("sp")
        own = lax.dynamic_slice_in_dim(ef, me * tl, tl, axis=1)
        return x + jnp.tanh(own @ w)
    return f


C.smap("s.ema_allgather_scan_own_slice.dp1xsp4", {"dp": 1, "sp": 4}, ema_sm,
       (P("dp", "sp"), P(), P()), P("dp", "sp"), ema_ref,
       (R(B2, T2, D2), R(D2, D2, scale=0.5), np.float32(0.8)),
       bugs=[("slice-index-dp", ["wrong-offset"]), ("gather-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. Ulysses attention: all_to_all heads <-> sequence and back.
B3, T3, D3, H3, E3 = 2, 16, 16, 8, 4


def attn_core(q, k, v):
    t = q.shape[1]
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(E3)
    s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e30)
    return jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)


def ulysses_ref(x, wqkv, wo):
    b, t, _ = x.shape
    q, k, v = jnp.split((x @ wqkv).reshape(b, t, 3 * H3, E3), 3, axis=2)
    return x + attn_core(q, k, v).reshape(b, t, H3 * E3) @ wo


def ulysses_sm(bug):
    def f(x, wqkv, wo):
        b, tl, _ = x.shape
        ax = "dp" if bug == "round-trip-over-dp" else "sp"
        q, k, v = jnp.split((x @ wqkv).reshape(b, tl, 3 * H3, E3), 3, axis=2)
        # [b, tl, H, E] -> [b, T, H/n, E]
        q, k, v = (lax.all_to_all(t, ax, split_axis=2, concat_axis=1, tiled=True) for t in (q, k, v))
        o = attn_core(q, k, v)
        # inverse: [b, T, H/n, E] -> [b, tl, H, E]
        if bug == "inverse-concat-headdim":
            o = lax.all_to_all(o, ax, split_axis=1, concat_axis=3, tiled=True)
        else:
            o = lax.all_to_all(o, ax, split_axis=1, concat_axis=2, tiled=True)
        return x + o.reshape(b, tl, H3 * E3) @ wo
    return f


C.smap("s.ulysses_all_to_all_round_trip.dp2xsp4", {"dp": 2, "sp": 4}, ulysses_sm,
       (P("dp", "sp"), P(), P()), P("dp", "sp"), ulysses_ref,
       (R(B3, T3, D3), R(D3, 3 * H3 * E3, scale=0.3), R(H3 * E3, D3, scale=0.3)),
       bugs=[("inverse-concat-headdim", ["wrong-axis"]), ("round-trip-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 4. ZeRO-1 momentum SGD: psum_scatter + all_gather over ('dp','tp').
B4, D4, O4, LR4, BETA4 = 32, 8, 8, 0.1, 0.9


def flat4(w, b):
    return jnp.concatenate([w.ravel(), b])


def unflat4(g):
    return g[:D4 * O4].reshape(D4, O4), g[D4 * O4:]


def zero_ref(w, b, mom, x, y):
    def loss(w, b):
        return jnp.mean(jnp.sum(jnp.square(x @ w + b - y), -1))
    l, (gw, gb) = jax.value_and_grad(loss, (0, 1))(w, b)
    m = BETA4 * mom + flat4(gw, gb)
    uw, ub = unflat4(-LR4 * m)
    return w + uw, b + ub, m, l


def zero_sm(bug):
    def f(w, b, mom, x, y):
        n = x.shape[0] * asize(("dp", "tp"))

        def local(w, b):
            return jnp.sum(jnp.square(x @ w + b - y)) / n
        l, (gw, gb) = jax.value_and_grad(local, (0, 1))(w, b)
        gs = lax.psum_scatter(flat4(gw, gb), ("dp", "tp"), scatter_dimension=0, tiled=True)
        m = BETA4 * mom + gs
        upd = lax.all_gather(-LR4 * m, ("tp", "dp") if bug == "gather-axes-swapped" else ("dp", "tp"),
                             axis=0, tiled=True)
        uw, ub = unflat4(upd)
        lt = psum(l, "dp") if bug == "loss-dp-only" else psum(l, ("dp", "tp"))
        return w + uw, b + ub, m, lt
    return f


C.smap("s.zero1_psum_scatter_all_gather_tuple_axes.dp4xtp2", {"dp": 4, "tp": 2}, zero_sm,
       (P(), P(), P(("dp", "tp")), P(("dp", "tp")), P(("dp", "tp"))), (P(), P(), P(("dp", "tp")), P()), zero_ref,
       (R(D4, O4, scale=0.4), R(O4, scale=0.2), R(D4 * O4 + O4, scale=0.1), R(B4, D4), R(B4, O4)),
       bugs=[("gather-axes-swapped", ["wrong-permutation"]), ("loss-dp-only", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. Nadaraya-Watson smoothing on a ring; the key block returns home.
B5, T5, E5 = 2, 16, 4


def nw_ref(q, k, v, wr):
    d2 = jnp.sum(jnp.square(q[:, :, None, :] - k[:, None, :, :]), -1)
    kern = jnp.exp(-0.5 * d2)
    out = jnp.einsum("bqk,bke->bqe", kern, v) / jnp.sum(kern, -1, keepdims=True)
    return out + k @ wr


def nw_sm(bug):
    def f(q, k, v, wr):
        n = 4
        q = lax.ppermute(q, "sp", [(j, j) for j in range(n)])  # identity: "fetch" the own block
        right = [(j, (j + 1) % n) for j in range(n)]
        left = [(j, (j - 1) % n) for j in range(n)]

        def body(s, c):
            num, den, kb, vb = c
            d2 = jnp.sum(jnp.square(q[:, :, None, :] - kb[:, None, :, :]), -1)
            kern = jnp.exp(-0.5 * d2)
            num = num + jnp.einsum("bqk,bke->bqe", kern, vb)
            den = den + jnp.sum(kern, -1, keepdims=True)
            kb = lax.ppermute(kb, "sp", right)
            vb = lax.ppermute(vb, "sp", left if bug == "v-rotated-opposite" else right)
            return num, den, kb, vb
        steps = n - 1 if bug == "cycle-one-short" else n
        num, den, kb, _ = lax.fori_loop(0, steps, body, (jnp.zeros_like(v), jnp.zeros(q.shape[:2] + (1,)), k, v))
        return num / den + kb @ wr  # kb is k again after the full cycle
    return f


C.smap("s.ring_full_cycle_identity_ppermute_nw.dp2xsp4", {"dp": 2, "sp": 4}, nw_sm,
       (P("dp", "sp"),) * 3 + (P(),), P("dp", "sp"), nw_ref,
       (R(B5, T5, E5, scale=0.7), R(B5, T5, E5, scale=0.7), R(B5, T5, E5), R(E5, E5, scale=0.5)),
       bugs=[("cycle-one-short", ["wrong-permutation"]), ("v-rotated-opposite", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 6. evaluation metrics: int32 / bool reductions, pmax / pmin of equal values.
B6, V6, WARM6 = 32, 10, 100
LOG6 = R(B6, V6)
LOG6[13, 4] = np.nan            # one device (rows 12..15) sees a NaN
LAB6 = I(0, V6, B6)
LAB6[::3] = np.argmax(LOG6[::3], -1)  # some correct predictions
LAB6[13] = 4
MASK6 = np.ones(B6, bool)
MASK6[[2, 9, 10, 21, 30]] = False


def metrics_ref(logits, labels, mask, lr, step):
    pred = jnp.argmax(logits, -1)
    ok = (pred == labels) & mask
    correct = jnp.sum(ok.astype(jnp.int32))
    nval = jnp.sum(mask.astype(jnp.int32))
    any_nan = jnp.any(jnp.isnan(logits))
    all_in = jnp.all((labels >= 0) & (labels < V6))
    mx = jnp.max(jnp.where(mask[:, None] & jnp.isfinite(logits), logits, -jnp.inf))
    lr_now = lr * jnp.minimum(1.0, step.astype(jnp.float32) / WARM6)
    return correct, correct.astype(jnp.float32) / nval, any_nan, all_in, mx, lr_now


def metrics_sm(bug):
    def f(logits, labels, mask, lr, step):
        both = ("dp", "tp")
        pred = jnp.argmax(logits, -1)
        ok = (pred == labels) & mask
        cl = jnp.sum(ok.astype(jnp.int32))
        correct = psum(cl, "dp") if bug == "count-dp-only" else psum(cl, both)
        nval = psum(jnp.sum(mask.astype(jnp.int32)), both)
        flag = jnp.any(jnp.isnan(logits)).astype(jnp.int32)
        any_nan = (pmin(flag, both) if bug == "or-by-pmin" else pmax(flag, both)) > 0
        all_in = pmin(jnp.all((labels >= 0) & (labels < V6)).astype(jnp.int32), both) > 0
        mx = pmax(jnp.max(jnp.where(mask[:, None] & jnp.isfinite(logits), logits, -jnp.inf)), both)
        step_g, lr_g = pmax(step, both), pmin(lr, both)  # equal on every device
        lr_now = lr_g * jnp.minimum(1.0, step_g.astype(jnp.float32) / WARM6)
        return correct, correct.astype(jnp.float32) / nval, any_nan, all_in, mx, lr_now
    return f


C.smap("s.metrics_int_bool_reductions_pmax_equal.dp4xtp2", {"dp": 4, "tp": 2}, metrics_sm,
       (P(("dp", "tp")),) * 3 + (P(), P()), (P(),) * 6, metrics_ref,
       (LOG6, LAB6, MASK6, np.float32(3e-4), np.int32(37)),
       bugs=[("count-dp-only", ["wrong-axis"]), ("or-by-pmin", ["wrong-collective"])])

# ---------------------------------------------------------------------------
# 7. spectral-norm clipping: power iteration in while_loop, cond on sigma.
D7, H7, IT7 = 16, 32, 12


def specclip_ref(w, u0):
    def body(c):
        i, u, v = c
        v = w.T @ u
        v = v / jnp.linalg.norm(v)
        u = w @ v
        return i + 1, u / jnp.linalg.norm(u), v
    _, u, v = lax.while_loop(lambda c: c[0] < IT7, body, (0, u0 / jnp.linalg.norm(u0), jnp.zeros(H7)))
    sigma = u @ w @ v
    return lax.cond(sigma > 1.0, lambda: w / sigma, lambda: w), sigma


def specclip_sm(bug):
    def f(w, u0):
        def body(c):
            i, u, v = c
            v = w.T @ u                                  # [H/4], local columns
            sq = jnp.sum(v * v)
            v = v / jnp.sqrt(sq if bug == "local-v-norm" else psum(sq, "tp"))
            u = psum(w @ v, "tp")
            return i + 1, u / jnp.linalg.norm(u), v
        # the counter is equal everywhere; pmax of it in the predicate changes nothing
        _, u, v = lax.while_loop(lambda c: pmax(c[0], "tp") < IT7, body,
                                 (0, u0 / jnp.linalg.norm(u0), jnp.zeros(w.shape[1])))
        part = u @ w @ v
        sigma = part if bug == "cond-local-sigma" else psum(part, "tp")
        return lax.cond(sigma > 1.0, lambda: w / sigma, lambda: w), psum(part, "tp")
    return f


C.smap("s.power_iter_while_pmax_counter_cond_sigma.dp1xtp4", {"dp": 1, "tp": 4}, specclip_sm,
       (P(None, "tp"), P()), (P(None, "tp"), P()), specclip_ref,
       (R(D7, H7, scale=0.3), R(D7)),
       bugs=[("local-v-norm", ["missing-collective"]), ("cond-local-sigma", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. vmap(spmd_axis_name='dp') over a shard_map'd per-example MLP.
B8, T8, D8, H8 = 4, 4, 8, 32


def rmsmlp_ref(x, w1, w2):
    h = jax.nn.gelu(x @ w1)
    h = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-5)
    return x + h @ w2


def rmsmlp_vmap(bug):
    def make(m):
        def body(x, w1, w2):   # one example: x [T, D]; w1 [D, H/4], w2 [H/4, D]
            h = jax.nn.gelu(x @ w1)
            hl = h.shape[-1]
            ss = psum(jnp.sum(h * h, -1, keepdims=True), "tp")
            if bug == "local-size":
                ms = ss / hl
            elif bug == "size-of-dp":
                ms = ss / (hl * asize("dp"))
            else:
                ms = ss / (hl * asize("tp"))
            h = h * lax.rsqrt(ms + 1e-5)
            return x + psum(h @ w2, "tp")
        sm = jax.shard_map(body, mesh=m, in_specs=(P(), P(None, "tp"), P("tp", None)), out_specs=P(),
                           check_vma=False)
        return jax.vmap(sm, in_axes=(0, None, None), spmd_axis_name="dp")
    return make


global_family("s.vmap_spmd_axis_name_over_shard_map.dp2xtp4", {"dp": 2, "tp": 4}, rmsmlp_vmap,
              (P("dp"), P(None, "tp"), P("tp", None)), P("dp"), rmsmlp_ref,
              (R(B8, T8, D8), R(D8, H8, scale=0.5), R(H8, D8, scale=0.3)),
              bugs=[("local-size", ["wrong-axis-size"]), ("size-of-dp", ["wrong-axis-size"])])

# ---------------------------------------------------------------------------
# 9. partial-manual shard_map (axis_names={'tp'}) for a vocab-parallel CE.
B9, D9, V9 = 8, 16, 64


def ce_ref(h, wv, lab):
    logits = h @ wv
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, lab[:, None], -1)[:, 0]
    return jnp.mean(nll), nll


def ce_partial(bug):
    def make(m):
        def body(h, wv, lab):   # h [B, D] (dp is GSPMD's), wv [D, V/4]
            logits = h @ wv
            vl = logits.shape[-1]
            mx = pmax(lax.stop_gradient(jnp.max(logits, -1, keepdims=True)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(logits - mx), -1), "tp")) + mx[:, 0]
            off = 0 if bug == "no-vocab-offset" else idx("tp") * vl
            loc = lab - off
            ins = (loc >= 0) & (loc < vl)
            t = jnp.where(ins, jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0], 0.0)
            tgt = pmean(t, "tp") if bug == "target-pmean" else psum(t, "tp")
            return lse - tgt
        sm = jax.shard_map(body, mesh=m, in_specs=(P(), P(None, "tp"), P()), out_specs=P(),
                           axis_names={"tp"}, check_vma=False)

        def f(h, wv, lab):
            nll = sm(h, wv, lab)
            return jnp.mean(nll), nll
        return f
    return make


global_family("s.partial_manual_tp_vocab_ce.dp2xtp4", {"dp": 2, "tp": 4}, ce_partial,
              (P("dp"), P(None, "tp"), P("dp")), (P(), P("dp")), ce_ref,
              (R(B9, D9), R(D9, V9, scale=0.5), I(0, V9, B9)),
              bugs=[("no-vocab-offset", ["wrong-offset"]), ("target-pmean", ["wrong-collective"])])

# ---------------------------------------------------------------------------
# 10. Adam step: pytree psum, broadcast from device 0, axis_index branches.
B10, D10, H10 = 16, 6, 8
LR10, B1_, B2_, EPS10, CLIP10 = 0.05, 0.9, 0.999, 1e-8, 1.0


def mlp10(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def adam_tail(p, m, v, g, t, lr_t, gnorm):
    c = jnp.minimum(1.0, CLIP10 / jnp.maximum(gnorm, 1e-12))
    g = jax.tree.map(lambda a: a * c, g)
    m = jax.tree.map(lambda a, b: B1_ * a + (1 - B1_) * b, m, g)
    v = jax.tree.map(lambda a, b: B2_ * a + (1 - B2_) * b * b, v, g)
    p = jax.tree.map(lambda a, mm, vv: a - lr_t * mm / (jnp.sqrt(vv) + EPS10), p, m, v)
    return p, m, v


def adam_ref(p, m, v, t, x, y):
    def loss(p):
        return jnp.mean(jnp.square(mlp10(p, x) - y))
    l, g = jax.value_and_grad(loss)(p)
    tf = (t + 1).astype(jnp.float32)
    lr_t = LR10 * jnp.sqrt(1 - B2_ ** tf) / (1 - B1_ ** tf)
    gnorm = jnp.sqrt(sum(jnp.sum(a * a) for a in jax.tree.leaves(g)))
    p, m, v = adam_tail(p, m, v, g, t, lr_t, gnorm)
    return p, m, v, t + 1, l


def adam_sm(bug):
    def f(p, m, v, t, x, y):
        def local(p):
            return jnp.sum(jnp.square(mlp10(p, x) - y))
        ls, g = jax.value_and_grad(local)(p)
        # one psum of the whole gradient pytree, one of a (loss, count) tuple
        g = psum(g, "pp") if bug == "grad-psum-pp" else psum(g, "dp")
        ls, cnt = psum((ls, jnp.float32(y.size)), "dp")
        g = jax.tree.map(lambda a: a / cnt, g)
        tf = (t + 1).astype(jnp.float32)
        lr_loc = LR10 * jnp.sqrt(1 - B2_ ** tf) / (1 - B1_ ** tf)
        # computed "once" on dp device 0 and broadcast by a masked psum
        lr_t = psum(lr_loc if bug == "broadcast-no-mask" else jnp.where(idx("dp") == 0, lr_loc, 0.0), "dp")
        # two formulas for the same norm, picked by device parity
        leaves = jax.tree.leaves(g)
        gnorm = lax.cond(idx("dp") % 2 == 0,
                         lambda: jnp.sqrt(sum(jnp.sum(a * a) for a in leaves)),
                         lambda: jnp.linalg.norm(jnp.concatenate([a.ravel() for a in leaves])))
        p, m, v = adam_tail(p, m, v, g, t, lr_t, gnorm)
        return p, m, v, t + 1, ls / cnt
    return f


P10 = {"w1": R(D10, H10, scale=0.5), "b1": R(H10, scale=0.1), "w2": R(H10, 2, scale=0.5)}
M10 = jax.tree.map(lambda a: (0.01 * a).astype(np.float32), P10)
V10 = jax.tree.map(lambda a: (0.001 * a * a + 1e-4).astype(np.float32), P10)
C.smap("s.adam_pytree_psum_masked_broadcast_parity_branch.pp1xdp4", {"pp": 1, "dp": 4}, adam_sm,
       (P(), P(), P(), P(), P("dp"), P("dp")), (P(), P(), P(), P(), P()), adam_ref,
       (P10, M10, V10, np.int32(4), R(B10, D10), R(B10, 2)),
       bugs=[("broadcast-no-mask", ["missing-mask"]), ("grad-psum-pp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
MESH11, MESH12 = {"dp": 2, "tp": 1, "sp": 4}, {"dp": 8, "tp": 1}
MESH13, MESH14 = {"a": 2, "b": 2, "c": 2}, {"dp": 4, "fsdp": 1, "tp": 2}


def wsc(x, mesh, spec):
    return lax.with_sharding_constraint(x, NamedSharding(make_mesh(mesh), spec))


# 11. MLP block on dp2 x tp1 x sp4.
def mlp_block(x, w1, w2, g):
    h = jax.nn.gelu(jnp.einsum("btd,dh->bth", x, w1))
    h = wsc(h, MESH11, P("dp", "sp", "tp"))
    y = x + jnp.einsum("bth,hd->btd", h, w2)
    return y * lax.rsqrt(jnp.mean(y * y, -1, keepdims=True) + 1e-6) * g


C.gspmd("g.mlp_block_size1_tp.dp2xtp1xsp4", MESH11,
        (P("dp", "sp"), P(None, "tp"), P("tp", None), P()), P("dp", "sp"), mlp_block,
        (R(2, 16, 8), R(8, 16, scale=0.4), R(16, 8, scale=0.4), 1.0 + R(8, scale=0.1)))


# 12. vocab cross-entropy on dp8 x tp1.
def vocab_ce(h, wv, lab):
    logits = wsc(h @ wv, MESH12, P("dp", "tp"))
    nll = jax.nn.logsumexp(logits, -1) - jnp.take_along_axis(logits, lab[:, None], -1)[:, 0]
    return jnp.mean(nll), jnp.sum((jnp.argmax(logits, -1) == lab).astype(jnp.int32))


C.gspmd("g.vocab_ce_size1_tp.dp8xtp1", MESH12, (P("dp"), P(None, "tp"), P("dp")), (P(), P()),
        vocab_ce, (R(16, 8), R(8, 32, scale=0.5), I(0, 32, 16)))


# 13. matmul and a reduction on a 2x2x2 mesh, re-constrained between layouts.
def three_axes(x, w):
    y = jnp.tanh(x @ w)
    y = wsc(y, MESH13, P("a", ("b", "c")))
    s = jnp.sum(y, 0, keepdims=True)
    z = wsc(y - s / y.shape[0], MESH13, P(("a", "b"), "c"))
    return z, jnp.sum(z * z)


C.gspmd("g.three_axes_reconstrain.a2xb2xc2", MESH13, (P(("a", "b"), "c"), P("c", None)),
        (P(None, ("a", "c")), P()), three_axes, (R(16, 8), R(8, 16, scale=0.5)))


# 14. SGD step with jax.grad on dp4 x fsdp1 x tp2.
def grad_step(p, x, y):
    def loss(p):
        h = jax.nn.relu(x @ p["w1"])
        h = wsc(h, MESH14, P("dp", "tp"))
        return jnp.mean(jnp.square(h @ p["w2"] - y))
    l, g = jax.value_and_grad(loss)(p)
    return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l


SP14 = {"w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")}
C.gspmd("g.grad_step_size1_fsdp.dp4xfsdp1xtp2", MESH14, (SP14, P("dp"), P("dp")),
        (SP14, P()), grad_step, ({"w1": R(8, 16, scale=0.4), "w2": R(16, 4, scale=0.4)}, R(16, 8), R(16, 4)))

C.known_miss("s.metrics_int_bool_reductions_pmax_equal.dp4xtp2.bug.or-by-pmin",
             "the bug changes the any-NaN flag only when some but not all devices see a NaN (the seeded LOG6 has "
             "one); random normal inputs hold no NaN, so on them pmin and pmax of the flags agree (both 0), and "
             "the rules leave the bool output unrelated")
C.finish()
