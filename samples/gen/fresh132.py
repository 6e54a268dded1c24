"""samples/fresh132: a 132nd batch of programs as a user writes them, on the theme of devices playing different roles by their position (per-device code that differs by lax.axis_index: a value computed only on device 0 and broadcast by a masked psum, per-device layers / heads / ensemble members selected from a sharded stack with [0], prefix sums over device totals by ppermute chains, a parameter-server update applied on device 0 and broadcast back, lax.switch / lax.cond on axis_index choosing different but equivalent computations, axis_index * block offsets in dynamic_slice and gathers, all_gather then this device's own row, device-ordered non-commutative reductions), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every correct pair is written to provoke a false alarm: the per-device
programs differ from device to device (masked by axis_index, switched on it,
offset by it), yet the whole computes the baseline up to rounding.
shard_map families (bugs in brackets):
 1. calibration on the first block (dp2): the normaliser (mean, std) of
    the batch's first rows, which live on device 0, is computed there and
    broadcast by psum(where(axis_index == 0, v, 0)); a tiny MLP training
    step (value_and_grad with check_vma=True, sgd with momentum).
    [the mask selects device 1; no mask, every device's statistic summed].
 2. per-head attention layers (dp2 x h4): wq / wk / wv stacked [H, ...]
    sharded over h and taken with [0]; the output projection stack wo
    replicated and this head's slice picked by wo[axis_index("h")]; the
    heads' outputs psum'd over h; jax.vjp of the local part with the
    cotangent of the psum'd output, gradients psum'd over dp, wo's also over
    h; adam from a warm state. [wo indexed by axis_index("dp"); gradients
    psum'd over h instead of dp].
 3. stream compaction (sp8): local int cumsum of a bool mask and float
    running sums, Hillis-Steele inclusive scan of the device totals by
    ppermutes (offsets 1, 2, 4), exclusive offset = inclusive - own total,
    destinations of the valid tokens, a packed output by a scatter
    (mode="drop") into a full array psum'd over sp. [ppermutes in the wrong
    direction; the inclusive scan used as the offset].
 4. parameter server (dp4): every device computes its gradient, the psum
    sends them to all, only device 0 applies the adam update (warm state),
    params and optimizer state broadcast back by a masked psum.
    [the server uses its local gradient only; the broadcast unmasked].
 5. row-parallel MLP (dp2 x tp4, check_vma=True): the SiLU of each tp
    block computed by lax.switch(axis_index) among four equivalent formulas,
    the output bias (pcast to varying first) added under
    lax.cond(axis_index("tp") == 0) before the psum; adamw. [bias added on
    every device; the cond tests the dp index].
 6. causal attention with the sequence over sp4: rows of a replicated
    learned position table taken by dynamic_slice at axis_index * block, a
    relative-position bias gathered at global query minus key positions, K/V
    all_gather'd; value_and_grad (check_vma=True), adam. [slice start one
    past the block offset; the query positions of the bias and causal mask
    local].
 7. first EOS across sequence shards (dp2 x sp4, check_vma=True): each
    device's (has-EOS, first global EOS index) all_gather'd (to="invarying"),
    the first device in order holding one chosen, masked mean pooling up to
    it, classifier CE, sgd. [the last device holding an EOS chosen; local
    EOS indices].
 8. deep ensemble, one member per device (e4 x dp2): params and adam
    states stacked over e and taken with [0], each member trained on the
    dp-sharded batch (gradients psum'd over dp), ensemble mean and
    disagreement by pmean over e. [gradients psum'd over e; gradients not
    reduced over dp].
 9. HMM forward algorithm with time over sp4: each device's normalised
    transfer matrix product (with log scales), all_gather'd, prefix products
    in device order (matrix products do not commute), this device's own
    prefix selected by [axis_index], filtered posteriors and the
    log-likelihood. [prefix products in reversed order; inclusive prefix].
10. multi-task heads (dp2 x task4): each task device computes a different
    loss (MSE, CE with int labels, BCE with bool targets, Poisson on int
    counts) chosen by lax.switch(axis_index("task")), losses and gradients
    psum'd over both axes, the classification accuracy count computed on
    task device 1 only and broadcast by a masked psum; adam.
    [switch index off by one (clamped); gradients psum'd over dp only].
GSPMD pairs (jax.jit with in/out shardings; correct): 11. a vmapped deep
ensemble training step with stacked params and adam states over e
(e4 x dp2); 12. a gated sum of stacked experts with the expert axis over e8,
sgd; 13. cumsum compaction of a bool mask with a scatter (sp8); 14. first-EOS
pooling classifier step (dp2 x sp4).
Numerics: correct pairs agree at f32 rounding (about 1e-6 relative); bug
variants differ clearly (order of the outputs or more).
Run from the repository root: bash samples/gen/run_fresh132.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh132.sh)
from fresh_lib import Corpus, seeded, np_tree, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh132.py"
C = Corpus("samples/fresh132", SCRIPT, "samples/gen/run_fresh132.sh", sys.argv[1:])
rng, R, I = seeded(132132)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
tmap = jax.tree.map


def rep(tree):
    return tmap(lambda _: P(), tree)


def warm(step, p, st, *data, k=2):
    """k reference steps so the optimizer state is not at its first step."""
    j = jax.jit(step)
    for _ in range(k):
        out = j(p, st, *data)
        p, st = out[0], out[1]
    return np_tree(p), np_tree(st)


def mlp(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


# ---------------------------------------------------------------------------
# 1. calibration statistic of the first block, computed on device 0.
B1, D1, H1 = 8, 6, 8
OPT1 = optax.sgd(0.1, momentum=0.9)


def calib_ref(p, mom, x, y):
    mu = jnp.mean(x[:4], 0)
    sd = jnp.std(x[:4], 0) + 1e-3
    xn = (x - mu) / sd

    def loss(p):
        return jnp.mean(jnp.square(mlp(p, xn) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, mom = OPT1.update(g, mom, p)
    return optax.apply_updates(p, u), mom, l


def calib_dp(bug):
    def f(p, mom, x, y):
        me = idx("dp")
        mu_l = jnp.mean(x, 0)
        sd_l = jnp.std(x, 0) + 1e-3
        owner = (me == 1) if bug == "wrong-device" else (me == 0)
        if bug == "no-mask":
            mu, sd = psum(mu_l, "dp"), psum(sd_l, "dp")
        else:
            mu = psum(jnp.where(owner, mu_l, 0.0), "dp")
            sd = psum(jnp.where(owner, sd_l, 0.0), "dp")
        xn = (x - mu) / sd

        def loss(p):
            return psum(jnp.sum(jnp.square(mlp(p, xn) - y)), "dp") / (B1 * 2)
        l, g = jax.value_and_grad(loss)(p)
        u, mom = OPT1.update(g, mom, p)
        return optax.apply_updates(p, u), mom, l
    return f


P1 = {"w1": R(D1, H1, scale=0.5), "b1": R(H1, scale=0.1), "w2": R(H1, 2, scale=0.5), "b2": R(2, scale=0.1)}
X1 = R(B1, D1, scale=2.0) + 1.0
Y1 = R(B1, 2)
P1, M1 = warm(calib_ref, P1, OPT1.init(P1), X1, Y1, k=1)
C.smap("s.calib_first_block_masked_psum_bcast.dp2", {"dp": 2}, calib_dp,
       (rep(P1), rep(M1), P("dp"), P("dp")), (rep(P1), rep(M1), P()), calib_ref, (P1, M1, X1, Y1),
       check_vma=True, bugs=[("wrong-device", ["wrong-index"]), ("no-mask", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 2. per-head attention layers, one head per h device.
H2, D2, DH2, B2, T2 = 4, 8, 4, 4, 6
OPT2 = optax.adam(1e-2)


def mha(p, x):
    q = jnp.einsum("btd,hde->bhte", x, p["wq"])
    k = jnp.einsum("btd,hde->bhte", x, p["wk"])
    v = jnp.einsum("btd,hde->bhte", x, p["wv"])
    a = jax.nn.softmax(q @ k.swapaxes(-1, -2) / np.sqrt(DH2), -1)
    return jnp.einsum("bhte,hed->btd", a @ v, p["wo"]) + x


def heads_ref(p, st, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mha(p, x) - y)))(p)
    u, st = OPT2.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def heads_sm(bug):
    def f(p, st, x, y):
        me = idx("h")
        sel = idx("dp") if bug == "wo-index-dp" else me

        def local(p):
            q, k, v = x @ p["wq"][0], x @ p["wk"][0], x @ p["wv"][0]
            a = jax.nn.softmax(q @ k.swapaxes(-1, -2) / np.sqrt(DH2), -1)
            return (a @ v) @ p["wo"][sel]
        part, vjp = jax.vjp(local, p)
        out = psum(part, "h") + x
        n = B2 * T2 * D2
        err = out - y
        l = psum(jnp.sum(jnp.square(err)), "dp") / n
        (g,) = vjp(2.0 * err / n)
        ax = "h" if bug == "grad-psum-h" else "dp"
        g = tmap(lambda t: psum(t, ax), g)
        g["wo"] = psum(g["wo"], "h")
        u, st = OPT2.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


P2 = {"wq": R(H2, D2, DH2, scale=0.4), "wk": R(H2, D2, DH2, scale=0.4), "wv": R(H2, D2, DH2, scale=0.4),
      "wo": R(H2, DH2, D2, scale=0.4)}
X2, Y2 = R(B2, T2, D2), R(B2, T2, D2)
P2, S2 = warm(heads_ref, P2, OPT2.init(P2), X2, Y2)
SPEC2 = {"wq": P("h"), "wk": P("h"), "wv": P("h"), "wo": P()}
C.smap("s.per_head_layers_stack0_wo_axis_index.dp2xh4", {"dp": 2, "h": 4}, heads_sm,
       (SPEC2, state_specs(S2, SPEC2), P("dp"), P("dp")), (SPEC2, state_specs(S2, SPEC2), P()),
       heads_ref, (P2, S2, X2, Y2),
       bugs=[("wo-index-dp", ["wrong-index"]), ("grad-psum-h", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. stream compaction by an exclusive scan of the device totals.
B3, T3 = 2, 32


def compact_ref(x, m):
    c = jnp.cumsum(m.astype(jnp.int32), 1)
    dest = jnp.where(m, c - 1, -1)
    run = jnp.cumsum(jnp.where(m, x, 0.0), 1)
    rows = jnp.arange(B3)[:, None]
    packed = jnp.zeros((B3, T3)).at[rows, jnp.where(m, c - 1, T3)].set(x, mode="drop")
    return dest, run, packed, c[:, -1]


def compact_sp(bug):
    def f(x, m):
        n = 8
        me = idx("sp")
        cl = jnp.cumsum(m.astype(jnp.int32), 1)
        fl = jnp.cumsum(jnp.where(m, x, 0.0), 1)
        tot_i, tot_f = cl[:, -1], fl[:, -1]
        inc_i, inc_f = tot_i, tot_f
        for d in (1, 2, 4):
            if bug == "wrong-direction":
                perm = [(j, j - d) for j in range(d, n)]
            else:
                perm = [(j, j + d) for j in range(n - d)]
            ri, rf = lax.ppermute(inc_i, "sp", perm), lax.ppermute(inc_f, "sp", perm)
            ok = me >= d
            inc_i, inc_f = jnp.where(ok, inc_i + ri, inc_i), jnp.where(ok, inc_f + rf, inc_f)
        if bug == "inclusive-offset":
            exc_i, exc_f = inc_i, inc_f
        else:
            exc_i, exc_f = inc_i - tot_i, inc_f - tot_f
        c = cl + exc_i[:, None]
        rows = jnp.arange(B3)[:, None]
        packed = jnp.zeros((B3, T3)).at[rows, jnp.where(m, c - 1, T3)].set(x, mode="drop")
        return jnp.where(m, c - 1, -1), fl + exc_f[:, None], psum(packed, "sp"), psum(tot_i, "sp")
    return f


M3 = rng.random((B3, T3)) < 0.45
M3[0, 8:16] = False     # two devices with no valid token in row 0
C.smap("s.stream_compaction_hillis_steele_exclusive.sp8", {"sp": 8}, compact_sp, (P(None, "sp"), P(None, "sp")),
       (P(None, "sp"), P(None, "sp"), P(), P()), compact_ref, (R(B3, T3), M3),
       bugs=[("wrong-direction", ["wrong-permutation"]), ("inclusive-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 4. parameter server: device 0 applies the update, the others receive it.
B4, D4, H4 = 16, 5, 8
OPT4 = optax.adam(2e-2)


def server_ref(p, st, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp(p, x) - y)))(p)
    u, st = OPT4.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def server_dp(bug):
    def f(p, st, x, y):
        me = idx("dp")
        l, g = jax.value_and_grad(lambda p: jnp.sum(jnp.square(mlp(p, x) - y)) / (B4 * 2))(p)
        if bug != "server-local-grad":
            g = tmap(lambda t: psum(t, "dp"), g)   # every worker sends its gradient
        l = psum(l, "dp")
        u, st2 = OPT4.update(g, st, p)
        p2 = optax.apply_updates(p, u)
        server = me == 0
        if bug == "bcast-unmasked":
            bc = lambda t: psum(t, "dp")
        else:
            bc = lambda t: psum(jnp.where(server, t, jnp.zeros_like(t)), "dp")
        return tmap(bc, p2), tmap(bc, st2), l
    return f


P4 = {"w1": R(D4, H4, scale=0.5), "b1": R(H4, scale=0.1), "w2": R(H4, 2, scale=0.5), "b2": R(2, scale=0.1)}
X4, Y4 = R(B4, D4), R(B4, 2)
P4, S4 = warm(server_ref, P4, OPT4.init(P4), X4, Y4)
C.smap("s.parameter_server_dev0_update_masked_bcast.dp4", {"dp": 4}, server_dp,
       (rep(P4), rep(S4), P("dp"), P("dp")), (rep(P4), rep(S4), P()), server_ref, (P4, S4, X4, Y4),
       bugs=[("server-local-grad", ["missing-all-reduce"]), ("bcast-unmasked", ["missing-mask"])])

# ---------------------------------------------------------------------------
# 5. row-parallel MLP: switch among equivalent SiLU forms, bias on tp device 0.
B5, D5, F5, O5 = 8, 8, 16, 4
OPT5 = optax.adamw(1e-2, weight_decay=1e-2)


def mlp5_ref(p, x):
    return jax.nn.silu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def rowpar_ref(p, st, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp5_ref(p, x) - y)))(p)
    u, st = OPT5.update(g, st, p)
    return optax.apply_updates(p, u), st, l


SILU_FORMS = [jax.nn.silu,
              lambda z: z * jax.nn.sigmoid(z),
              lambda z: z / (1.0 + jnp.exp(-z)),
              lambda z: 0.5 * z * (1.0 + jnp.tanh(0.5 * z))]


def rowpar_sm(bug):
    def f(p, st, x, y):
        tp = idx("tp")

        def loss(p):
            h = lax.switch(tp, SILU_FORMS, x @ p["w1"] + p["b1"])
            part = h @ p["w2"]
            # b2 made varying before the cond, so that its gradient's psum is
            # not inside a branch only some devices take
            b2 = lax.pcast(p["b2"], ("dp", "tp"), to="varying")
            if bug == "bias-every-device":
                part = part + b2
            else:
                first = (idx("dp") == 0) if bug == "cond-dp-index" else (tp == 0)
                part = lax.cond(first, lambda a, b: a + b, lambda a, b: a, part, b2)
            out = psum(part, "tp")
            return psum(jnp.sum(jnp.square(out - y)), "dp") / (B5 * O5)
        l, g = jax.value_and_grad(loss)(p)
        u, st = OPT5.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


P5 = {"w1": R(D5, F5, scale=0.4), "b1": R(F5, scale=0.1), "w2": R(F5, O5, scale=0.4), "b2": R(O5) + 1.0}
X5, Y5 = R(B5, D5), R(B5, O5)
P5, S5 = warm(rowpar_ref, P5, OPT5.init(P5), X5, Y5)
SPEC5 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}
C.smap("s.rowpar_switch_silu_forms_cond_bias_dev0.dp2xtp4", {"dp": 2, "tp": 4}, rowpar_sm,
       (SPEC5, state_specs(S5, SPEC5), P("dp"), P("dp")), (SPEC5, state_specs(S5, SPEC5), P()),
       rowpar_ref, (P5, S5, X5, Y5), check_vma=True,
       bugs=[("bias-every-device", ["extra-reduction"]), ("cond-dp-index", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. causal attention, positions by axis_index * block offsets.
B6, T6, D6 = 2, 16, 8
OPT6 = optax.adam(1e-2)


def attn6(p, h, qpos, kpos, hk):
    q, k, v = h @ p["wq"], hk @ p["wk"], hk @ p["wv"]
    s = q @ k.swapaxes(-1, -2) / np.sqrt(D6) + p["rel"][qpos[:, None] - kpos[None, :] + T6 - 1]
    s = jnp.where(qpos[:, None] >= kpos[None, :], s, -1e9)
    return jax.nn.softmax(s, -1) @ v


def pos_ref(p, st, x, y):
    def loss(p):
        h = x + p["pos"]
        pos = jnp.arange(T6)
        return jnp.mean(jnp.square(attn6(p, h, pos, pos, h) - y))
    l, g = jax.value_and_grad(loss)(p)
    u, st = OPT6.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def pos_sp(bug):
    def f(p, st, x, y):
        tl = x.shape[1]
        off = idx("sp") * tl
        start = off + 1 if bug == "slice-plus-one" else off

        def loss(p):
            h = x + lax.dynamic_slice_in_dim(p["pos"], start, tl, 0)
            hk = lax.all_gather(h, "sp", axis=1, tiled=True)
            qpos = jnp.arange(tl) if bug == "qpos-local" else off + jnp.arange(tl)
            o = attn6(p, h, qpos, jnp.arange(T6), hk)
            return psum(jnp.sum(jnp.square(o - y)), "sp") / (B6 * T6 * D6)
        l, g = jax.value_and_grad(loss)(p)
        u, st = OPT6.update(g, st, p)
        return optax.apply_updates(p, u), st, l
    return f


P6 = {"pos": R(T6, D6, scale=0.5), "rel": R(2 * T6 - 1), "wq": R(D6, D6, scale=0.4),
      "wk": R(D6, D6, scale=0.4), "wv": R(D6, D6, scale=0.4)}
X6, Y6 = R(B6, T6, D6), R(B6, T6, D6)
P6, S6 = warm(pos_ref, P6, OPT6.init(P6), X6, Y6)
C.smap("s.causal_attn_pos_slice_axis_index_offset.sp4", {"sp": 4}, pos_sp,
       (rep(P6), rep(S6), P(None, "sp"), P(None, "sp")), (rep(P6), rep(S6), P()), pos_ref, (P6, S6, X6, Y6),
       check_vma=True, bugs=[("slice-plus-one", ["wrong-offset"]), ("qpos-local", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 7. first EOS across sequence shards, pooled classifier.
B7, T7, V7, D7, K7, EOS = 4, 32, 12, 8, 3, 11
OPT7 = optax.sgd(0.3)


def eos_ref(p, tok, lab):
    is_eos = tok == EOS
    first = jnp.where(jnp.any(is_eos, 1), jnp.argmax(is_eos, 1), T7 - 1)
    keep = (jnp.arange(T7)[None, :] <= first[:, None]).astype(jnp.float32)

    def loss(p):
        emb = p["emb"][tok]
        pooled = jnp.sum(emb * keep[..., None], 1) / jnp.sum(keep, 1)[:, None]
        lg = pooled @ p["w"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(lg, -1), lab[:, None], 1))
    l, g = jax.value_and_grad(loss)(p)
    u, _ = OPT7.update(g, OPT7.init(p), p)
    return optax.apply_updates(p, u), l, first


def eos_sm(bug):
    def f(p, tok, lab):
        n, tl = 4, tok.shape[1]
        me = idx("sp")
        is_eos = tok == EOS
        has = jnp.any(is_eos, 1).astype(jnp.int32)
        loc = jnp.argmax(is_eos, 1)
        fl = loc if bug == "eos-local-index" else me * tl + loc
        has_all = lax.all_gather(has, "sp", to="invarying")          # [n, b], the same on every sp device
        first_all = lax.all_gather(fl, "sp", to="invarying")
        if bug == "last-eos-device":
            dev = n - 1 - jnp.argmax(has_all[::-1], 0)
        else:
            dev = jnp.argmax(has_all, 0)              # first device, in order, with an EOS
        pick = jnp.take_along_axis(first_all, dev[None, :], 0)[0]
        first = jnp.where(jnp.any(has_all > 0, 0), pick, T7 - 1)
        keep = ((me * tl + jnp.arange(tl))[None, :] <= first[:, None]).astype(jnp.float32)

        def loss(p):
            emb = p["emb"][tok]
            s = psum(jnp.sum(emb * keep[..., None], 1), "sp")
            cnt = psum(jnp.sum(keep, 1), "sp")
            lg = (s / cnt[:, None]) @ p["w"]
            nll = -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(lg, -1), lab[:, None], 1))
            return psum(nll, "dp") / B7
        l, g = jax.value_and_grad(loss)(p)
        u, _ = OPT7.update(g, OPT7.init(p), p)
        return optax.apply_updates(p, u), l, first
    return f


TOK7 = I(0, EOS, B7, T7)
TOK7[0, [19, 27]] = EOS          # first in sp block 2, another in block 3
TOK7[1, [3, 12, 30]] = EOS
TOK7[3, [9, 10, 25]] = EOS       # row 2: no EOS at all
P7 = {"emb": R(V7, D7), "w": R(D7, K7)}
LAB7 = I(0, K7, B7)
C.smap("s.first_eos_across_shards_gather_pick_first_dev.dp2xsp4", {"dp": 2, "sp": 4}, eos_sm,
       (rep(P7), P("dp", "sp"), P("dp")), (rep(P7), P(), P("dp")), eos_ref, (P7, TOK7, LAB7), check_vma=True,
       bugs=[("last-eos-device", ["wrong-index"]), ("eos-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. deep ensemble, one member per e device, own optimizer state.
E8, B8, D8, H8, BE8 = 4, 8, 5, 8, 6
OPT8 = optax.adam(3e-2)


def member_step(p, st, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(jnp.square(mlp(p, x) - y)))(p)
    u, st = OPT8.update(g, st, p)
    return optax.apply_updates(p, u), st, l


def ens_ref(p, st, x, y, xe):
    p2, st2, l = jax.vmap(member_step, in_axes=(0, 0, None, None))(p, st, x, y)
    pred = jax.vmap(mlp, in_axes=(0, None))(p2, xe)
    mean = jnp.mean(pred, 0)
    return p2, st2, l, mean, jnp.mean(jnp.square(pred - mean), 0)


def ens_sm(bug):
    def f(p, st, x, y, xe):
        pm, sm = tmap(lambda a: a[0], p), tmap(lambda a: a[0], st)
        l, g = jax.value_and_grad(lambda q: jnp.sum(jnp.square(mlp(q, x) - y)) / (B8 * 2))(pm)
        if bug == "grad-psum-e":
            g = tmap(lambda t: psum(t, "e"), g)
        elif bug != "grad-no-dp-reduce":
            g = tmap(lambda t: psum(t, "dp"), g)
        l = psum(l, "dp")
        u, sm = OPT8.update(g, sm, pm)
        pm = optax.apply_updates(pm, u)
        pred = mlp(pm, xe)
        mean = pmean(pred, "e")
        var = pmean(jnp.square(pred - mean), "e")
        return tmap(lambda a: a[None], pm), tmap(lambda a: a[None], sm), l[None], mean, var
    return f


P8 = {"w1": R(E8, D8, H8, scale=0.5), "b1": R(E8, H8, scale=0.1), "w2": R(E8, H8, 2, scale=0.5),
      "b2": R(E8, 2, scale=0.1)}
X8, Y8, XE8 = R(B8, D8), R(B8, 2), R(BE8, D8)


def ens_warm(p, st, x, y):
    return jax.vmap(member_step, in_axes=(0, 0, None, None))(p, st, x, y)


P8, S8 = warm(ens_warm, P8, jax.vmap(OPT8.init)(P8), X8, Y8)
E_SPEC8, S_SPEC8 = tmap(lambda _: P("e"), P8), tmap(lambda _: P("e"), S8)
C.smap("s.ensemble_member_per_device_own_adam.e4xdp2", {"e": 4, "dp": 2}, ens_sm,
       (E_SPEC8, S_SPEC8, P("dp"), P("dp"), P()), (E_SPEC8, S_SPEC8, P("e"), P(), P()), ens_ref,
       (P8, S8, X8, Y8, XE8),
       bugs=[("grad-psum-e", ["wrong-axis"]), ("grad-no-dp-reduce", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 9. HMM forward algorithm, device-ordered prefix products of transfer matrices.
S9, V9, B9, T9 = 3, 5, 2, 16


def hmm_params(tl, el, pl):
    return jax.nn.softmax(tl, -1), jax.nn.softmax(el, -1), jax.nn.softmax(pl)


def hmm_ref(tl, el, pl, obs):
    A, Em, pi = hmm_params(tl, el, pl)

    def step(alpha, o):
        a = (alpha @ A) * Em[:, o].T
        c = jnp.sum(a, -1, keepdims=True)
        return a / c, (a / c, jnp.log(c[:, 0]))
    _, (filt, logc) = lax.scan(step, jnp.broadcast_to(pi, (B9, S9)), obs.T)
    return filt.transpose(1, 0, 2), jnp.sum(logc, 0)


def hmm_sp(bug):
    def f(tl_, el, pl, obs):
        n, tl = 4, obs.shape[1]
        me = idx("sp")
        A, Em, pi = hmm_params(tl_, el, pl)
        M = jnp.broadcast_to(jnp.eye(S9), (B9, S9, S9))
        ls = jnp.zeros(B9)
        for t in range(tl):
            M = M @ (A[None] * Em[:, obs[:, t]].T[:, None, :])
            s = jnp.sum(M, (1, 2))
            M, ls = M / s[:, None, None], ls + jnp.log(s)
        Mall, lsall = lax.all_gather(M, "sp"), lax.all_gather(ls, "sp")
        acc = jnp.broadcast_to(pi, (B9, S9))
        lz = jnp.zeros(B9)
        pref = []
        for j in range(n):
            pref.append(acc)
            if bug == "reversed-product":
                acc = jnp.einsum("bst,bt->bs", Mall[j], acc)
            else:
                acc = jnp.einsum("bs,bst->bt", acc, Mall[j])
            z = jnp.sum(acc, -1)
            acc, lz = acc / z[:, None], lz + jnp.log(z)
        starts = jnp.stack(pref[1:] + [acc]) if bug == "inclusive-prefix" else jnp.stack(pref)
        alpha = starts[me]

        def step(alpha, o):
            a = (alpha @ A) * Em[:, o].T
            a = a / jnp.sum(a, -1, keepdims=True)
            return a, a
        _, filt = lax.scan(step, alpha, obs.T)
        return filt.transpose(1, 0, 2), lz + jnp.sum(lsall, 0)
    return f


C.smap("s.hmm_forward_device_ordered_prefix_products.sp4", {"sp": 4}, hmm_sp, (P(), P(), P(), P(None, "sp")),
       (P(None, "sp"), P()), hmm_ref, (R(S9, S9), R(S9, V9, scale=1.5), R(S9), I(0, V9, B9, T9)),
       bugs=[("reversed-product", ["wrong-order"]), ("inclusive-prefix", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. multi-task heads, one task per task device, chosen by lax.switch.
B10, D10, H10 = 8, 6, 8
OPT10 = optax.adam(1e-2)


def trunk(p, x):
    return jnp.tanh(x @ p["w"] + p["b"])


def task_losses(p, x, yr, yc, yb, yn, nb):
    h = trunk(p, x)
    lc = h @ p["cls"]
    r = (h @ p["cnt"])[:, 0]
    return [lambda: jnp.sum(jnp.square(h @ p["reg"] - yr)) / nb,
            lambda: -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(lc, -1), yc[:, None], 1)) / nb,
            lambda: jnp.sum(optax.sigmoid_binary_cross_entropy((h @ p["bin"])[:, 0], yb.astype(jnp.float32))) / nb,
            lambda: jnp.sum(jnp.exp(r) - yn.astype(jnp.float32) * r) / nb], lc


def mt_ref(p, st, x, yr, yc, yb, yn):
    def loss(p):
        ls, lc = task_losses(p, x, yr, yc, yb, yn, B10)
        return sum(fn() for fn in ls), lc
    (l, lc), g = jax.value_and_grad(loss, has_aux=True)(p)
    u, st = OPT10.update(g, st, p)
    return optax.apply_updates(p, u), st, l, jnp.sum(jnp.argmax(lc, -1) == yc)


def mt_sm(bug):
    def f(p, st, x, yr, yc, yb, yn):
        t = idx("task")
        k = t + 1 if bug == "switch-plus-one" else t

        def loss(p):
            ls, lc = task_losses(p, x, yr, yc, yb, yn, B10)
            return lax.switch(k, ls), lc
        (l, lc), g = jax.value_and_grad(loss, has_aux=True)(p)
        axes = "dp" if bug == "grad-psum-dp-only" else ("dp", "task")
        g = tmap(lambda a: psum(a, axes), g)
        l = psum(l, ("dp", "task"))
        correct = jnp.sum(jnp.argmax(lc, -1) == yc)
        correct = psum(jnp.where(t == 1, correct, 0), ("dp", "task"))
        u, st = OPT10.update(g, st, p)
        return optax.apply_updates(p, u), st, l, correct
    return f


P10 = {"w": R(D10, H10, scale=0.5), "b": R(H10, scale=0.1), "reg": R(H10, 2, scale=0.5),
       "cls": R(H10, 3, scale=0.5), "bin": R(H10, 1, scale=0.5), "cnt": R(H10, 1, scale=0.3)}
D10A = (R(B10, D10), R(B10, 2), I(0, 3, B10), rng.random(B10) < 0.5, I(0, 4, B10))
P10, S10 = warm(mt_ref, P10, OPT10.init(P10), *D10A)
C.smap("s.multitask_switch_on_task_index_masked_count.dp2xtask4", {"dp": 2, "task": 4}, mt_sm,
       (rep(P10), rep(S10)) + (P("dp"),) * 5, (rep(P10), rep(S10), P(), P()), mt_ref, (P10, S10) + D10A,
       bugs=[("switch-plus-one", ["wrong-index"]), ("grad-psum-dp-only", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 11. vmapped ensemble training step, members over e.
C.gspmd("g.ensemble_vmap_adam_stacked_members.e4xdp2", {"e": 4, "dp": 2},
        (E_SPEC8, S_SPEC8, P("dp"), P("dp"), P()), (E_SPEC8, S_SPEC8, P("e"), P(), P()), ens_ref,
        (P8, S8, X8, Y8, XE8))

# 12. gated sum of stacked experts, experts over e8, sgd.
E12, B12, D12 = 8, 6, 6


def experts_step(p, x, y):
    def loss(p):
        gates = jax.nn.softmax(x @ p["wg"], -1)
        ye = jnp.tanh(jnp.einsum("bd,edh->beh", x, p["w"]))
        return jnp.mean(jnp.square(jnp.einsum("be,beh->bh", gates, ye) - y))
    l, g = jax.value_and_grad(loss)(p)
    return tmap(lambda a, b: a - 0.5 * b, p, g), l


C.gspmd("g.stacked_experts_gated_sum_sgd.e8", {"e": 8}, ({"w": P("e"), "wg": P(None, "e")}, P(), P()),
        ({"w": P("e"), "wg": P(None, "e")}, P()), experts_step,
        ({"w": R(E12, D12, D12, scale=0.5), "wg": R(D12, E12)}, R(B12, D12), R(B12, D12, scale=0.5)))

# 13. cumsum compaction over a sequence sharded over sp8.
C.gspmd("g.cumsum_compaction_scatter_bool_mask.sp8", {"sp": 8}, (P(None, "sp"), P(None, "sp")),
        (P(None, "sp"), P(None, "sp"), P(), P()), compact_ref, (R(B3, T3), M3))

# 14. first-EOS pooling classifier step, batch over dp and sequence over sp.
C.gspmd("g.first_eos_pool_classifier_sgd.dp2xsp4", {"dp": 2, "sp": 4}, (rep(P7), P("dp", "sp"), P("dp")),
        (rep(P7), P(), P("dp")), eos_ref, (P7, TOK7, LAB7))

C.known_miss('s.first_eos_across_shards_gather_pick_first_dev.dp2xsp4.bug.eos-local-index',
             "the bug takes each device's local position of its first EOS (integer token ids compared with an EOS id); the witness draws integer ids either over the whole range split across the devices, where the outputs differ, or within each device's own share of the range, where they agree, and counts a program that differs only in the first as undecided (it may assume its ids lie in the device's share); the rules do not relate an all-gather of partial maxima picked by the first device that has one")
C.known_miss('s.first_eos_across_shards_gather_pick_first_dev.dp2xsp4.bug.last-eos-device',
             "the bug picks the last device's EOS instead of the first; as for eos-local-index, the witness's two draws of integer ids disagree (the outputs differ on ids drawn over the whole range, agree on ids drawn within each device's share), which it counts as undecided, and the rules do not relate an all-gather of partial maxima picked by the first device that has one")
C.finish()
