"""samples/fresh77: a 77th batch of programs as a user writes them, on the theme of optimizers beyond Adam with sharded parameters and optimizer state in current JAX / optax (Muon, Adafactor, LAMB, LARS, Lion, Sophia, Shampoo, schedule-free AdamW), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Muon on a wide weight (16 x 32) with its columns over tp4: Nesterov
    momentum, Frobenius normalisation (squared sum psum'd over tp), five
    quintic Newton-Schulz steps with the Gram matrix X X^T psum'd over tp
    (a sum over the sharded dim), Moonlight scaling 0.2 sqrt(max(m, n)) and
    decoupled weight decay. Bugs: the Frobenius norm of the local shard,
    the Gram matrix not psum'd.
 2. Muon under FSDP (dp4) on a tall weight (32 x 16) whose rows are over
    dp: jax.grad of an MSE loss whose forward all_gathers the weight (the
    gradient comes back reduce-scattered), momentum kept sharded, the
    momentum all_gather'd before the (transposed, tall) Newton-Schulz and the
    device's own rows sliced back. Bugs: Newton-Schulz on the local block
    (missing all_gather), own rows sliced at offset 0.
 3. Adafactor with relative step size and parameter scaling on a weight over
    dp2 x tp4 (rows over dp, columns over tp): row means of g^2 psum'd over
    tp, column means psum'd over dp, the normaliser mean(v_r) psum'd over dp,
    update clipping by its global RMS and the parameter RMS over both axes.
    Bugs: row mean divided by the local column count, column mean psum'd
    over tp, update RMS of the local shard.
 4. LAMB on a 2-layer tensor-parallel MLP (dp2 x tp4, check_vma=True):
    jax.grad, loss pmean'd over dp, optax.scale_by_adam and
    add_decayed_weights with a mask shard-wise, then a hand-written trust
    ratio whose parameter and update norms are psum'd over each leaf's
    sharded axes, then scale_by_learning_rate; the baseline uses
    optax.scale_by_trust_ratio in the same chain. Bugs: trust ratio per
    shard (no psum), update norm psum'd over (dp, tp) for the tp-sharded
    leaves.
 5. LARS on a stack of 4 layer weights (4, 16, 32) under dp2 x tp4
    (P(None, dp, tp)) with a trust ratio per layer (norms over the last two
    dims psum'd over both axes, the stack axis kept), momentum, and a bias
    stack excluded from adaptation. Bugs: one norm over the whole stack,
    trust ratio per shard, norms psum'd over tp only.
 6. Lion with ZeRO-sharded momentum (dp4): replicated weight, jax.grad on
    the local batch, psum_scatter / dp of the gradient rows, the Lion update
    on the device's rows, new weight all_gather'd; baseline optax.lion.
    Bugs: the reduce-scatter not divided by dp, own rows sliced from the
    next device, the new weight gathered along the wrong dim.
 7. schedule-free AdamW (optax.contrib.schedule_free_adamw) on a
    tensor-parallel MLP (dp2 x tp4, check_vma=True), gradient at y,
    two steps, returning params, state and the eval params
    (schedule_free_eval_params). Bugs: the output bias added inside the
    row-parallel psum (counted tp times), the row-parallel output pmean'd
    instead of psum'd.
 8. a Sophia-style clipped update on FSDP x TP leaves (a matrix over
    (dp, tp), a vector over tp) with a Gauss-Newton Hessian EMA, the update
    clipped to [-1, 1] and the clipped fraction over the whole tree logged
    (counts psum'd over each leaf's sharded axes, divided by the global
    size). Bugs: fraction divided by the local element count, the vector's
    count psum'd over (dp, tp).
 9. block-diagonal Shampoo on a weight (16 x 32), columns over tp4, batch
    over dp2: G = x^T e psum'd over dp, the left statistic G G^T psum'd over
    tp, right statistics per tp block (local), inverse fourth roots by two
    coupled Newton-Schulz inverse-square-root iterations, L^-1/4 G R^-1/4.
    Bugs: G psum'd over tp, left statistic not psum'd.
10. EMA of parameters with bias correction after optax.adamw with a decay
    mask on an FSDP x TP tree, plus the global parameter norm of the EMA
    logged. Bugs: the EMA debias uses the wrong step count (state count not
    incremented first), norm psum'd over dp only for a (dp, tp) leaf.
16. Muon with the Newton-Schulz iteration in bf16, columns over tp4, the
    Gram matrix psum'd in bf16. Bug: the Gram matrix not psum'd.
17. SOAP-style Adam in a fixed eigenbasis (QL replicated, QR's rows over
    tp4, W's columns over tp4): QL^T G QR as a local product
    reduce-scattered to the rotated columns, Adam moments in the rotated
    basis, the step rotated back by QL N QR^T with QR all_gather'd and a
    second reduce-scatter. Bugs: QL instead of QL^T (a transposed
    preconditioner), N QR instead of N QR^T on the way back, psum then
    the first column block.
18. cautious Lion under dp2 x tp4: the sign update masked where it
    disagrees with the gradient, rescaled by size / (count + 1) per leaf
    with the count psum'd over tp. Bugs: the mask mean over the local
    shard, the count psum'd over (dp, tp).
19. Sophia-H: a Hutchinson probe u * (H u) with H u by jax.jvp of
    jax.grad on the local batch, gradient and H u pmean'd over dp4,
    parameters replicated. Bugs: H u not pmean'd, H u psum'd.
24. clipping by the global norm then optax.adamw with a decay mask over a
    dp4 x tp2 tree, all squared sums in ONE psum over (dp, tp), each
    leaf's local sum divided first by the size of the axes it is
    replicated over. Bugs: the replicated leaf not divided, the FSDP leaf
    divided by dp instead of tp.
25. Adafactor written with pmean of local means (equal shards), rows over
    dp2, columns over tp4, the factored estimate an outer product over the
    row-mean. Bugs: column means pmean'd over tp, row-mean of the local
    rows only.
26. a LAMB-style trust ratio with each tp-sharded leaf and its update
    all_gather'd and normed by jnp.linalg.norm (dp2 x tp4). Bugs: gathered
    over dp (where the leaf is replicated), the update not gathered.
27. Muon on a tall weight (32 x 16), rows over tp4, replicated over dp2,
    X^T X psum'd over tp, the quintic iteration in a lax.fori_loop. Bugs:
    the Gram matrix psum'd over (dp, tp), the Frobenius normalisation
    applied after the iteration instead of before.
28. the block-diagonal Shampoo of 9. written vectorised: the baseline
    reshapes G into its column blocks, one einsum for all right statistics
    and jax.vmap for their roots. Bugs: the right statistics psum'd over
    tp, the right roots' columns reversed.
GSPMD pairs (jax.jit with in/out shardings; correct only): 11. the Muon
step of 1. with columns over tp4; 12. the Adafactor step of 3. on dp2 x
tp4; 13. an optax.lamb training step of the MLP of 4. on dp2 x tp4; 14. an
optax.lion step with the momentum rows over dp4; 15. optax.contrib
schedule-free AdamW on the MLP of 7.; 20. optax.contrib.muon on a tree with tensor-parallel 2-D weights (tp4);
21. optax.adafactor (factored) on an FSDP x TP tree; 22. optax.chain(clip_by_global_norm, lion) on
FSDP-sharded leaves (dp4); 23. optax.lars on a stacked layer weight (dp2 x tp4).
Notes: the first draft of 4. wrote the trust ratio as where(pn > 0 & un > 0, pn / un', 1); on the
checker's random inputs (negative second moments, hence NaN norms) that differs from
optax.scale_by_trust_ratio's where(pn == 0 | un == 0, 1, pn / un), so it was rewritten the optax way.
The first draft of 5. (trust coefficient 0.02) left the whole-stack bug inside rounding-ish distance on
random inputs; the coefficient is now 1.0.
Numerics: every correct pair agrees with its baseline at rounding level; every
bug variant differs clearly (see "numerics" in the manifest).
Run from the repository root: bash samples/gen/run_fresh77.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh77.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh77.py"
C = Corpus("samples/fresh77", SCRIPT, "samples/gen/run_fresh77.sh", sys.argv[1:])
rng, R, I = seeded(7777)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
DT = {"dp": 2, "tp": 4}

# ---------------------------------------------------------------------------
# 1. Muon, columns over tp.
NS_A, NS_B, NS_C = 3.4445, -4.7750, 2.0315
MU1, LR1, WD1 = 0.95, 0.02, 0.01


def ns_wide(x, gram=lambda a: a @ a.T):
    for _ in range(5):
        a = gram(x)
        b = NS_B * a + NS_C * (a @ a)
        x = NS_A * x + b @ x
    return x


def muon_ref(w, m, g):
    m = MU1 * m + g
    u = g + MU1 * m
    x = u / (jnp.sqrt(jnp.sum(u * u)) + 1e-7)
    o = ns_wide(x)
    scale = 0.2 * np.sqrt(max(w.shape))
    return w - LR1 * (scale * o + WD1 * w), m


def muon_tp(bug):
    def f(w, m, g):
        m = MU1 * m + g
        u = g + MU1 * m
        sq = jnp.sum(u * u)
        if bug != "fro-norm-local":
            sq = psum(sq, "tp")
        x = u / (jnp.sqrt(sq) + 1e-7)
        if bug == "gram-not-psummed":
            o = ns_wide(x)
        else:
            o = ns_wide(x, lambda a: psum(jnp.dot(a, a.T), "tp"))
        scale = 0.2 * np.sqrt(max(16, 32))
        return w - LR1 * (scale * o + WD1 * w), m
    return f


A1 = (R(16, 32, scale=0.3), R(16, 32, scale=0.1), R(16, 32, scale=0.1))
C.smap("s.muon_newton_schulz_cols.tp4", {"tp": 4}, muon_tp, (P(None, "tp"),) * 3, (P(None, "tp"),) * 2,
       muon_ref, A1, bugs=[("fro-norm-local", ["missing-all-reduce"]), ("gram-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. Muon under FSDP: tall weight, rows over dp.


def ns_any(x):
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = ns_wide(x / (jnp.linalg.norm(x) + 1e-7))
    return x.T if tall else x


def mse_loss(w, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ w) - y))


def muon_fsdp_ref(w, m, x, y):
    g = jax.grad(mse_loss)(w, x, y)
    m = MU1 * m + g
    o = ns_any(g + MU1 * m)
    return w - LR1 * np.sqrt(max(1.0, w.shape[0] / w.shape[1])) * o, m


def muon_fsdp(bug):
    def f(w, m, x, y):
        def loss(w):
            wf = lax.all_gather(w, "dp", axis=0, tiled=True)
            return pmean(mse_loss(wf, x, y), "dp")
        g = jax.grad(loss)(w)
        m = MU1 * m + g
        u = g + MU1 * m
        if bug == "ns-on-local-block":
            o = ns_any(u)
        else:
            full = lax.all_gather(u, "dp", axis=0, tiled=True)
            rows = u.shape[0]
            start = 0 if bug == "own-rows-at-offset-0" else idx("dp") * rows
            o = lax.dynamic_slice_in_dim(ns_any(full), start, rows, 0)
        return w - LR1 * np.sqrt(max(1.0, 32 / 16)) * o, m
    return f


A2 = (R(32, 16, scale=0.2), R(32, 16, scale=0.05), R(16, 32), R(16, 16, scale=0.5))
C.smap("s.muon_fsdp_gather_then_orthogonalise.dp4", {"dp": 4}, muon_fsdp, (P("dp"), P("dp"), P("dp"), P("dp")),
       (P("dp"), P("dp")), muon_fsdp_ref, A2, check_vma=True,
       bugs=[("ns-on-local-block", ["missing-collective"]), ("own-rows-at-offset-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. Adafactor (relative step, parameter scale, update clipping), dp x tp.
B2_3, EPS1, EPS2, CLIPD, RHO3 = 0.8, 1e-30, 1e-3, 1.0, 0.01


def adafactor_ref(w, vr, vc, g):
    g2 = g * g + EPS1
    vr = B2_3 * vr + (1 - B2_3) * jnp.mean(g2, 1)
    vc = B2_3 * vc + (1 - B2_3) * jnp.mean(g2, 0)
    u = g * lax.rsqrt(vr[:, None] * vc[None, :] / jnp.mean(vr))
    u = u / jnp.maximum(1.0, jnp.sqrt(jnp.mean(u * u)) / CLIPD)
    scale = jnp.maximum(EPS2, jnp.sqrt(jnp.mean(w * w)))
    return w - RHO3 * scale * u, vr, vc


def adafactor_2d(bug):
    def f(w, vr, vc, g):
        nr, nc = 16, 32  # global rows, columns
        g2 = g * g + EPS1
        rs = psum(jnp.sum(g2, 1), "tp")
        vr = B2_3 * vr + (1 - B2_3) * rs / (g.shape[1] if bug == "row-mean-local-count" else nc)
        cs = psum(jnp.sum(g2, 0), "tp" if bug == "col-mean-over-tp" else "dp")
        vc = B2_3 * vc + (1 - B2_3) * cs / nr
        vr_mean = psum(jnp.sum(vr), "dp") / nr
        u = g * lax.rsqrt(vr[:, None] * vc[None, :] / vr_mean)
        usq = jnp.sum(u * u)
        usq = usq / u.size if bug == "rms-u-local" else psum(usq, ("dp", "tp")) / (nr * nc)
        u = u / jnp.maximum(1.0, jnp.sqrt(usq) / CLIPD)
        wsq = psum(jnp.sum(w * w), ("dp", "tp")) / (nr * nc)
        return w - RHO3 * jnp.maximum(EPS2, jnp.sqrt(wsq)) * u, vr, vc
    return f


A3 = (R(16, 32, scale=0.5), np.abs(R(16, scale=0.1)) + 0.01, np.abs(R(32, scale=0.1)) + 0.01, R(16, 32, scale=3.0))
C.smap("s.adafactor_relative_step_factored.dp2xtp4", DT, adafactor_2d, (P("dp", "tp"), P("dp"), P("tp"), P("dp", "tp")),
       (P("dp", "tp"), P("dp"), P("tp")), adafactor_ref, A3,
       bugs=[("row-mean-local-count", ["wrong-scale"]), ("col-mean-over-tp", ["wrong-collective-group"]),
             ("rms-u-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. LAMB on a tensor-parallel MLP (dp2 x tp4).
SPEC4 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}


def mlp(p, x, tp_sum=lambda y: y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    return tp_sum(h @ p["w2"]) + p["b2"]


def no_bias(p):
    return {k: k.startswith("w") for k in p}


def lamb_chain(tr):
    return optax.chain(optax.scale_by_adam(0.9, 0.99, 1e-6), optax.add_decayed_weights(0.01, no_bias), tr,
                       optax.scale_by_learning_rate(0.01))


def tr_sharded(bug):
    def update(u, state, p):
        def one(k):
            ax = tuple(a for a in SPEC4[k] if a is not None)
            pn, un = jnp.sum(jnp.square(p[k])), jnp.sum(jnp.square(u[k]))
            if ax and bug != "trust-ratio-per-shard":
                pn = psum(pn, ax)
                if bug == "update-norm-over-dp-tp":  # cast to dp-varying so check_vma lets the psum run
                    un = psum(lax.pcast(un, "dp", to="varying"), ("dp", "tp"))
                else:
                    un = psum(un, ax)
            pn, un = jnp.sqrt(pn), jnp.sqrt(un)
            r = jnp.where((pn == 0.0) | (un == 0.0), 1.0, pn / un)  # as optax.scale_by_trust_ratio
            return u[k] * r
        return {k: one(k) for k in u}, state
    return optax.GradientTransformation(lambda p: optax.ScaleByTrustRatioState(), update)


OPT4 = lamb_chain(optax.scale_by_trust_ratio())


def init4():
    return {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.1), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.1)}


P4 = init4()
S4 = OPT4.init(P4)
SS4 = state_specs(S4, SPEC4)


def lamb_ref(p, s, x, y):
    g = jax.grad(lambda p: mse(mlp(p, x), y))(p)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s


def mse(a, b):
    return jnp.mean(jnp.square(a - b))


def lamb_sm(bug):
    opt = lamb_chain(tr_sharded(bug))

    def f(p, s, x, y):
        g = jax.grad(lambda p: pmean(mse(mlp(p, x, lambda z: psum(z, "tp")), y), "dp"))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s
    return f


A4 = (P4, S4, R(8, 16), R(8, 8))
C.smap("s.lamb_trust_ratio_tp_mlp.dp2xtp4", DT, lamb_sm, (SPEC4, SS4, P("dp"), P("dp")), (SPEC4, SS4), lamb_ref, A4,
       check_vma=True, bugs=[("trust-ratio-per-shard", ["missing-all-reduce"]),
                             ("update-norm-over-dp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. LARS with a trust ratio per layer of a stacked (scanned) weight.
ETA5, WD5, MOM5, LR5 = 1.0, 1e-3, 0.9, 0.1


def lars_ref(w, b, mw, mb, gw, gb):
    pn = jnp.sqrt(jnp.sum(w * w, (1, 2), keepdims=True))
    gn = jnp.sqrt(jnp.sum(gw * gw, (1, 2), keepdims=True))
    tr = ETA5 * pn / (gn + WD5 * pn)
    mw = MOM5 * mw + tr * (gw + WD5 * w)
    mb = MOM5 * mb + gb
    return w - LR5 * mw, b - LR5 * mb, mw, mb


def lars_sm(bug):
    def f(w, b, mw, mb, gw, gb):
        if bug == "norm-over-whole-stack":
            pn, gn = psum(jnp.sum(w * w), ("dp", "tp")), psum(jnp.sum(gw * gw), ("dp", "tp"))
        else:
            pn, gn = jnp.sum(w * w, (1, 2), keepdims=True), jnp.sum(gw * gw, (1, 2), keepdims=True)
            if bug != "trust-ratio-per-shard":
                ax = "tp" if bug == "psum-over-tp-only" else ("dp", "tp")
                pn, gn = psum(pn, ax), psum(gn, ax)
        pn, gn = jnp.sqrt(pn), jnp.sqrt(gn)
        tr = ETA5 * pn / (gn + WD5 * pn)
        mw = MOM5 * mw + tr * (gw + WD5 * w)
        mb = MOM5 * mb + gb
        return w - LR5 * mw, b - LR5 * mb, mw, mb
    return f


SP5 = (P(None, "dp", "tp"), P(None, "tp"), P(None, "dp", "tp"), P(None, "tp"), P(None, "dp", "tp"), P(None, "tp"))
A5 = (R(4, 16, 32, scale=0.2) * np.array([1, 3, 0.5, 2], np.float32)[:, None, None], R(4, 32, scale=0.1),
      R(4, 16, 32, scale=0.01), R(4, 32, scale=0.01), R(4, 16, 32, scale=0.05) * np.array([2, 1, 4, 0.5], np.float32)[:, None, None],
      R(4, 32, scale=0.05))
C.smap("s.lars_per_layer_trust_stacked.dp2xtp4", DT, lars_sm, SP5, SP5[:4], lars_ref, A5,
       bugs=[("norm-over-whole-stack", ["wrong-reduction"]), ("trust-ratio-per-shard", ["missing-all-reduce"]),
             ("psum-over-tp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 6. Lion with ZeRO-sharded momentum (dp4).
OPT6 = optax.lion(3e-3, b1=0.9, b2=0.99, weight_decay=0.1)


def lion_loss(w, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ w) - y))


def lion_ref(w, m, x, y):
    g = jax.grad(lion_loss)(w, x, y)
    s = OPT6.init(w)
    s = (s[0]._replace(mu=m),) + tuple(s[1:])
    u, s = OPT6.update(g, s, w)
    return optax.apply_updates(w, u), s[0].mu


def lion_zero(bug):
    def f(w, m, x, y):
        g = jax.grad(lion_loss)(w, x, y)
        g = lax.psum_scatter(g, "dp", scatter_dimension=0, tiled=True)
        if bug != "scatter-not-averaged":
            g = g / 4
        rows = m.shape[0]
        me = (idx("dp") + 1) % 4 if bug == "own-rows-from-next-device" else idx("dp")
        ws = lax.dynamic_slice_in_dim(w, me * rows, rows, 0)
        c = 0.9 * m + 0.1 * g
        ws = ws - 3e-3 * (jnp.sign(c) + 0.1 * ws)
        m = 0.99 * m + 0.01 * g
        if bug == "gathered-along-columns":
            wn = lax.all_gather(ws, "dp", axis=1, tiled=True).reshape(w.shape)
        else:
            wn = lax.all_gather(ws, "dp", axis=0, tiled=True)
        return wn, m
    return f


A6 = (R(16, 8, scale=0.3), R(16, 8, scale=0.02), R(16, 16), R(16, 8, scale=0.5))
C.smap("s.lion_zero_sharded_momentum.dp4", {"dp": 4}, lion_zero, (P(), P("dp"), P("dp"), P("dp")), (P(), P("dp")),
       lion_ref, A6, bugs=[("scatter-not-averaged", ["wrong-scale"]), ("own-rows-from-next-device", ["wrong-offset"]),
                           ("gathered-along-columns", ["wrong-shard-dim"])])

# ---------------------------------------------------------------------------
# 7. schedule-free AdamW on a tensor-parallel MLP.
OPT7 = optax.contrib.schedule_free_adamw(1e-2, warmup_steps=2, weight_decay=0.05)
P7 = init4()
S7 = OPT7.init(P7)
S7 = S7._replace(z=jax.tree.map(lambda a: a + R(*a.shape, scale=0.05), S7.z))
SS7 = state_specs(S7, SPEC4)


def sf_ref(p, s, x, y):
    for _ in range(2):
        g = jax.grad(lambda p: mse(mlp(p, x), y))(p)
        u, s = OPT7.update(g, s, p)
        p = optax.apply_updates(p, u)
    return p, s, optax.contrib.schedule_free_eval_params(s, p)


def sf_sm(bug):
    def f(p, s, x, y):
        def fwd(p):
            h = jax.nn.gelu(x @ p["w1"] + p["b1"])
            if bug == "bias-inside-psum":
                return psum(h @ p["w2"] + p["b2"], "tp")
            red = pmean if bug == "row-parallel-pmeaned" else psum
            return red(h @ p["w2"], "tp") + p["b2"]

        def loss(p):
            return pmean(mse(fwd(p), y), "dp")
        for _ in range(2):
            g = jax.grad(loss)(p)
            u, s = OPT7.update(g, s, p)
            p = optax.apply_updates(p, u)
        return p, s, optax.contrib.schedule_free_eval_params(s, p)
    return f


C.smap("s.schedule_free_adamw_tp_mlp.dp2xtp4", DT, sf_sm, (SPEC4, SS7, P("dp"), P("dp")), (SPEC4, SS7, SPEC4), sf_ref,
       (P7, S7, R(8, 16), R(8, 8)), check_vma=True,
       bugs=[("bias-inside-psum", ["wrong-scale"]), ("row-parallel-pmeaned", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 8. Sophia-style clipped update with the clipped fraction logged.
B1_8, B2_8, RHO8, LR8, WD8 = 0.9, 0.95, 0.05, 1e-3, 0.1
SPEC8 = {"w": P("dp", "tp"), "v": P("tp")}


def sophia_leaf(p, m, h, g, gh):
    m = B1_8 * m + (1 - B1_8) * g
    h = B2_8 * h + (1 - B2_8) * 8.0 * gh * gh  # Gauss-Newton-Bartlett estimate, batch 8
    r = m / jnp.maximum(RHO8 * h, 1e-12)
    u = jnp.clip(r, -1.0, 1.0)
    return p - LR8 * (u + WD8 * p), m, h, jnp.sum((jnp.abs(r) >= 1.0).astype(jnp.float32))


def sophia_ref(p, m, h, g, gh):
    out = {k: sophia_leaf(p[k], m[k], h[k], g[k], gh[k]) for k in p}
    frac = sum(o[3] for o in out.values()) / sum(x.size for x in p.values())
    return ({k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()},
            {k: o[2] for k, o in out.items()}, frac)


def sophia_sm(bug):
    def f(p, m, h, g, gh):
        out = {k: sophia_leaf(p[k], m[k], h[k], g[k], gh[k]) for k in p}
        axes = {"w": ("dp", "tp"), "v": ("dp", "tp") if bug == "vector-count-over-dp-tp" else ("tp",)}
        cnt = sum(psum(out[k][3], axes[k]) for k in out)
        n = sum(x.size for x in p.values()) if bug == "fraction-local-count" else 16 * 32 + 32
        return ({k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()},
                {k: o[2] for k, o in out.items()}, cnt / n)
    return f


def tree8(scale, pos=False):
    t = {"w": R(16, 32, scale=scale), "v": R(32, scale=scale)}
    return jax.tree.map(lambda a: np.abs(a) + 1e-3, t) if pos else t


A8 = (tree8(0.5), tree8(0.02), tree8(0.3, True), tree8(0.05), tree8(0.1))
C.smap("s.sophia_clipped_fraction_fsdp_tp.dp2xtp4", DT, sophia_sm, (SPEC8,) * 5, (SPEC8, SPEC8, SPEC8, P()), sophia_ref,
       A8, bugs=[("fraction-local-count", ["wrong-scale"]), ("vector-count-over-dp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 9. block-diagonal Shampoo, columns over tp4, batch over dp2.


def inv_sqrt_ns(a, iters=10):
    """(Y, Z) -> (a^1/2, a^-1/2) by the coupled Newton-Schulz iteration."""
    c = jnp.sqrt(jnp.sum(a * a))
    eye = jnp.eye(a.shape[0], dtype=a.dtype)
    y, z = a / c, eye
    for _ in range(iters):
        t = 0.5 * (3.0 * eye - z @ y)
        y, z = y @ t, t @ z
    return y * jnp.sqrt(c), z / jnp.sqrt(c)


def inv_root4(a):
    _, z = inv_sqrt_ns(a)      # a^-1/2
    s, _ = inv_sqrt_ns(z)      # (a^-1/2)^1/2
    return s


EPS9, LR9, NB9 = 0.1, 0.05, 4


def shampoo_ref(w, lst, rst, x, e):
    g = x.T @ e / x.shape[0]
    lst = lst + g @ g.T
    lq = inv_root4(lst + EPS9 * jnp.eye(16))
    blocks = []
    rnew = []
    for j in range(NB9):
        gj = g[:, 8 * j:8 * j + 8]
        rj = rst[j] + gj.T @ gj
        rnew.append(rj)
        blocks.append(lq @ gj @ inv_root4(rj + EPS9 * jnp.eye(8)))
    return w - LR9 * jnp.concatenate(blocks, 1), lst, jnp.stack(rnew)


def shampoo_sm(bug):
    def f(w, lst, rst, x, e):
        g = psum(x.T @ e, "tp" if bug == "grad-psum-over-tp" else "dp") / 16
        gg = g @ g.T
        lst = lst + (gg if bug == "left-stat-not-psummed" else psum(gg, "tp"))
        lq = inv_root4(lst + EPS9 * jnp.eye(16))
        rj = rst[0] + g.T @ g
        upd = lq @ g @ inv_root4(rj + EPS9 * jnp.eye(8))
        return w - LR9 * upd, lst, rj[None]
    return f


def spd(n, k):
    a = R(n, n, scale=0.3)
    return (a @ a.T / n + 0.5 * np.eye(n)).astype(np.float32) if k is None else \
        np.stack([spd(n, None) for _ in range(k)])


A9 = (R(16, 32, scale=0.3), spd(16, None), spd(8, NB9), R(16, 16), R(16, 32, scale=0.5))
C.smap("s.shampoo_blockdiag_newton_roots.dp2xtp4", DT, shampoo_sm,
       (P(None, "tp"), P(), P("tp"), P("dp"), P("dp", "tp")), (P(None, "tp"), P(), P("tp")), shampoo_ref, A9,
       bugs=[("grad-psum-over-tp", ["wrong-collective-group"]), ("left-stat-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. AdamW with a decay mask, then an EMA of the parameters with bias
#     correction, and the EMA's global norm logged.
SPEC10 = {"wq": P("dp", "tp"), "wo": P("tp", "dp"), "g": P(), "emb": P("dp")}
OPT10 = optax.adamw(3e-3, weight_decay=0.1, mask=lambda p: {k: k.startswith("w") for k in p})
DEC10 = 0.9


def init10():
    return {"wq": R(16, 32, scale=0.3), "wo": R(32, 16, scale=0.3), "g": 1 + R(16, scale=0.1), "emb": R(8, 16)}


P10 = init10()
S10 = OPT10.init(P10)
SS10 = state_specs(S10, SPEC10)
EMA10 = jax.tree.map(lambda a: a * 0.1, P10)


def ema_step(p, s, ema, t, g, upd_count):
    u, s = OPT10.update(g, s, p)
    p = optax.apply_updates(p, u)
    t = t + 1 if upd_count else t
    ema = jax.tree.map(lambda e, x: DEC10 * e + (1 - DEC10) * x, ema, p)
    deb = jax.tree.map(lambda e: e / (1 - DEC10 ** t), ema)
    return p, s, ema, deb


def ema_ref(p, s, ema, t, g):
    p, s, ema, deb = ema_step(p, s, ema, t, g, True)
    return p, s, ema, deb, optax.global_norm(deb)


def ema_sm(bug):
    def f(p, s, ema, t, g):
        p, s, ema, deb = ema_step(p, s, ema, t, g, bug != "debias-with-old-count")
        axes = {"wq": ("dp", "tp"), "wo": ("tp", "dp"), "g": (), "emb": ("dp",)}
        if bug == "norm-over-dp-only":
            axes["wq"] = ("dp",)
        sq = sum(psum(jnp.sum(deb[k] ** 2), a) if a else jnp.sum(deb[k] ** 2) for k, a in axes.items())
        return p, s, ema, deb, jnp.sqrt(sq)
    return f


G10 = jax.tree.map(lambda a: R(*a.shape, scale=0.1), P10)
C.smap("s.adamw_mask_param_ema_debias.dp2xtp4", DT, ema_sm, (SPEC10, SS10, SPEC10, P(), SPEC10),
       (SPEC10, SS10, SPEC10, SPEC10, P()), ema_ref, (P10, S10, EMA10, np.float32(3.0), G10),
       bugs=[("debias-with-old-count", ["wrong-scale"]), ("norm-over-dp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
C.gspmd("g.muon_newton_schulz_cols.tp4", {"tp": 4}, (P(None, "tp"),) * 3, (P(None, "tp"),) * 2, muon_ref, A1)
C.gspmd("g.adafactor_relative_step.dp2xtp4", DT, (P("dp", "tp"), P("dp"), P("tp"), P("dp", "tp")),
        (P("dp", "tp"), P("dp"), P("tp")), adafactor_ref, A3)
OPT13 = optax.lamb(1e-2, weight_decay=0.01, mask=no_bias)
S13 = OPT13.init(P4)


def lamb13(p, s, x, y):
    g = jax.grad(lambda p: mse(mlp(p, x), y))(p)
    u, s = OPT13.update(g, s, p)
    return optax.apply_updates(p, u), s


SS13 = state_specs(S13, SPEC4)
C.gspmd("g.optax_lamb_tp_mlp.dp2xtp4", DT, (SPEC4, SS13, P("dp"), P("dp")), (SPEC4, SS13), lamb13,
        (P4, S13, R(8, 16), R(8, 8)))
C.gspmd("g.optax_lion_sharded_momentum.dp4", {"dp": 4}, (P(), P("dp"), P("dp"), P("dp")), (P(), P("dp")), lion_ref, A6)
C.gspmd("g.schedule_free_adamw_tp_mlp.dp2xtp4", DT, (SPEC4, SS7, P("dp"), P("dp")), (SPEC4, SS7, SPEC4), sf_ref,
        (P7, S7, R(8, 16), R(8, 8)))

# ---------------------------------------------------------------------------
# 16. Muon with the Newton-Schulz iteration in bf16 (as the reference Muon
#     code runs it), columns over tp4, the Gram matrix psum'd in bf16.


def muon_bf16_ref(w, m, g):
    m = MU1 * m + g
    u = g + MU1 * m
    x = (u / (jnp.sqrt(jnp.sum(u * u)) + 1e-7)).astype(jnp.bfloat16)
    o = ns_wide(x).astype(jnp.float32)
    return w - LR1 * (0.2 * np.sqrt(32) * o + WD1 * w), m


def muon_bf16_tp(bug):
    def f(w, m, g):
        m = MU1 * m + g
        u = g + MU1 * m
        x = (u / (jnp.sqrt(psum(jnp.sum(u * u), "tp")) + 1e-7)).astype(jnp.bfloat16)
        if bug == "gram-psummed-over-nothing":
            o = ns_wide(x)
        else:
            o = ns_wide(x, lambda a: psum(a @ a.T, "tp"))
        return w - LR1 * (0.2 * np.sqrt(32) * o.astype(jnp.float32) + WD1 * w), m
    return f


C.smap("s.muon_bf16_newton_schulz_cols.tp4", {"tp": 4}, muon_bf16_tp, (P(None, "tp"),) * 3, (P(None, "tp"),) * 2,
       muon_bf16_ref, A1, bugs=[("gram-psummed-over-nothing", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 17. SOAP-style Adam in a fixed Shampoo eigenbasis: G' = QL^T G QR with the
#     columns of W (16 x 32) and the rows of QR over tp4; G QR as a local
#     product reduce-scattered to the rotated columns, Adam moments in the
#     rotated basis (sharded like W), the step rotated back by QL N QR^T
#     with QR all_gather'd and a second reduce-scatter.
B1_17, B2_17, EPS17, LR17 = 0.9, 0.99, 1e-8, 0.01


def soap_ref(w, m, v, g, ql, qr):
    gr = ql.T @ g @ qr
    m = B1_17 * m + (1 - B1_17) * gr
    v = B2_17 * v + (1 - B2_17) * gr * gr
    n = m / (jnp.sqrt(v) + EPS17)
    return w - LR17 * (ql @ n @ qr.T), m, v


def soap_tp(bug):
    def f(w, m, v, g, ql, qr):
        lq = ql if bug == "left-rotation-untransposed" else ql.T
        part = lq @ g @ qr  # (16, 32): the sum over this device's columns of G
        gr = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
        m = B1_17 * m + (1 - B1_17) * gr
        v = B2_17 * v + (1 - B2_17) * gr * gr
        n = m / (jnp.sqrt(v) + EPS17)
        qfull = lax.all_gather(qr, "tp", axis=0, tiled=True)  # (32, 32)
        k = n.shape[1]
        if bug == "back-rotation-untransposed":  # N QR: QR's rows of the own rotated columns
            back = ql @ n @ lax.dynamic_slice_in_dim(qfull, idx("tp") * k, k, 0)
        else:  # N QR^T: QR[:, own rotated columns] transposed
            back = ql @ n @ lax.dynamic_slice_in_dim(qfull, idx("tp") * k, k, 1).T
        if bug == "psum-then-first-block":
            upd = psum(back, "tp")[:, :k]
        else:
            upd = lax.psum_scatter(back, "tp", scatter_dimension=1, tiled=True)
        return w - LR17 * upd, m, v
    return f


def orth(n):
    q, _ = np.linalg.qr(R(n, n))
    return q.astype(np.float32)


A17 = (R(16, 32, scale=0.3), R(16, 32, scale=0.01), np.abs(R(16, 32, scale=0.01)) + 1e-4, R(16, 32, scale=0.1),
       orth(16), orth(32))
C.smap("s.soap_rotated_adam_eigenbasis.tp4", {"tp": 4}, soap_tp,
       (P(None, "tp"), P(None, "tp"), P(None, "tp"), P(None, "tp"), P(), P("tp", None)),
       (P(None, "tp"),) * 3, soap_ref, A17,
       bugs=[("left-rotation-untransposed", ["wrong-operand"]), ("back-rotation-untransposed", ["wrong-operand"]),
             ("psum-then-first-block", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 18. cautious Lion (C-Lion) under dp2 x tp4: the sign update masked where it
#     disagrees with the gradient and rescaled by size / (count + 1) per
#     leaf, the count psum'd over the leaf's sharded axis (tp).
SPEC18 = {"w": P(None, "tp"), "b": P("tp")}


def clion_leaf(p, m, g, count=lambda c: c, size=None):
    u = jnp.sign(0.9 * m + 0.1 * g)
    mask = (u * g > 0).astype(jnp.float32)
    scale = (size or mask.size) / (count(jnp.sum(mask)) + 1.0)
    return p - 1e-3 * (u * mask * scale + 0.1 * p), 0.99 * m + 0.01 * g


def clion_ref(p, m, g):
    out = {k: clion_leaf(p[k], m[k], g[k]) for k in p}
    return {k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()}


def clion_sm(bug):
    def f(p, m, g):
        def count(c):
            return psum(c, ("dp", "tp") if bug == "count-over-dp-tp" else "tp")
        out = {}
        for k in p:
            if bug == "mask-mean-local":
                out[k] = clion_leaf(p[k], m[k], g[k])
            else:
                out[k] = clion_leaf(p[k], m[k], g[k], count, p[k].size * 4)
        return {k: o[0] for k, o in out.items()}, {k: o[1] for k, o in out.items()}
    return f


def t18(scale):
    return {"w": R(16, 32, scale=scale), "b": R(32, scale=scale)}


C.smap("s.cautious_lion_masked_rescale.dp2xtp4", DT, clion_sm, (SPEC18,) * 3, (SPEC18, SPEC18), clion_ref,
       (t18(0.5), t18(0.1), t18(0.1)),
       bugs=[("mask-mean-local", ["wrong-scale"]), ("count-over-dp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 19. Sophia-H: the Hessian diagonal by a Hutchinson probe u * (H u), H u by
#     jax.jvp of jax.grad (forward over reverse) on the local batch, both the
#     gradient and the Hessian-vector product pmean'd over dp4; parameters
#     replicated.


def shl_loss(p, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ p["w"] + p["b"]) - y))


def sophia_h_step(p, m, h, u, g, hvp):
    m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    h = jax.tree.map(lambda a, z, hv: 0.95 * a + 0.05 * z * hv, h, u, hvp)
    upd = jax.tree.map(lambda a, b: jnp.clip(a / jnp.maximum(0.05 * b, 1e-3), -1.0, 1.0), m, h)
    return jax.tree.map(lambda a, b: a - 1e-2 * (b + 0.1 * a), p, upd), m, h


def sophia_h_ref(p, m, h, u, x, y):
    gfn = jax.grad(shl_loss)
    g, hvp = jax.jvp(lambda q: gfn(q, x, y), (p,), (u,))
    return sophia_h_step(p, m, h, u, g, hvp)


def sophia_h_sm(bug):
    def f(p, m, h, u, x, y):
        gfn = jax.grad(shl_loss)
        g, hvp = jax.jvp(lambda q: gfn(q, x, y), (p,), (u,))
        g = pmean(g, "dp")
        if bug == "hvp-psummed":
            hvp = psum(hvp, "dp")
        elif bug != "hvp-not-pmeaned":
            hvp = pmean(hvp, "dp")
        return sophia_h_step(p, m, h, u, g, hvp)
    return f


def t19(scale, pos=False):
    t = {"w": R(8, 8, scale=scale), "b": R(8, scale=scale)}
    return jax.tree.map(lambda a: np.abs(a) + 0.05, t) if pos else t


C.smap("s.sophia_h_hutchinson_jvp_grad.dp4", {"dp": 4}, sophia_h_sm, (P(), P(), P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), sophia_h_ref, (t19(0.5), t19(0.05), t19(0.1, True), t19(1.0), R(16, 8), R(16, 8, scale=0.5)),
       bugs=[("hvp-not-pmeaned", ["missing-all-reduce"]), ("hvp-psummed", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# More GSPMD pairs: 20. optax.contrib.muon on a tree with tensor-parallel 2-D
# weights; 21. optax.adafactor (factored) on an FSDP x TP tree; 22. optax.chain
# (clip_by_global_norm, lion) on FSDP-sharded leaves; 23. optax.lars on a
# stacked layer weight.
SPEC20 = {"w1": P(None, "tp"), "w2": P("tp", None), "b": P()}
P20 = {"w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3), "b": R(16, scale=0.1)}
G20 = jax.tree.map(lambda a: R(*a.shape, scale=0.1), P20)


def opt_step(opt):
    def f(p, s, g):
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s
    return f


for gname, mesh, spec, opt in [
        ("g.optax_contrib_muon_tree.tp4", {"tp": 4}, SPEC20, optax.contrib.muon(0.02, weight_decay=0.01)),
        ("g.optax_adafactor_fsdp_tp.dp2xtp4", DT, {"w1": P("dp", "tp"), "w2": P("tp", "dp"), "b": P()},
         optax.adafactor(1e-2, min_dim_size_to_factor=8)),
        ("g.optax_clip_global_norm_lion_fsdp.dp4", {"dp": 4}, {"w1": P("dp"), "w2": P("dp"), "b": P()},
         optax.chain(optax.clip_by_global_norm(0.5), optax.lion(1e-3, weight_decay=0.1)))]:
    st = opt.init(P20)
    C.gspmd(gname, mesh, (spec, state_specs(st, spec), spec), (spec, state_specs(st, spec)), opt_step(opt),
            (P20, st, G20))

OPT23 = optax.lars(0.1, weight_decay=1e-3, trust_coefficient=0.5, momentum=0.9)
P23 = {"stack": A5[0], "b": A5[1]}
S23 = OPT23.init(P23)
SPEC23 = {"stack": P(None, "dp", "tp"), "b": P(None, "tp")}
C.gspmd("g.optax_lars_stacked.dp2xtp4", DT, (SPEC23, state_specs(S23, SPEC23), SPEC23),
        (SPEC23, state_specs(S23, SPEC23)), opt_step(OPT23), (P23, S23, {"stack": A5[4], "b": A5[5]}))

# ---------------------------------------------------------------------------
# 24. clipping by the global norm, then optax.adamw with a decay mask, over a
#     dp4 x tp2 tree whose squared sums go through ONE psum over both axes:
#     each leaf's local squared sum divided by the size of the axes it is
#     replicated over first.
DT24 = {"dp": 4, "tp": 2}
SPEC24 = {"wq": P("dp", "tp"), "emb": P("dp", None), "b": P("tp"), "g": P()}
REPL24 = {"wq": 1, "emb": 2, "b": 4, "g": 8}
OPT24 = optax.adamw(1e-2, weight_decay=0.1, mask=lambda p: {k: k in ("wq", "emb") for k in p})


def p24(scale):
    return {"wq": R(16, 8, scale=scale), "emb": R(16, 8, scale=scale), "b": R(8, scale=scale), "g": R(8, scale=scale)}


P24 = p24(0.5)
S24 = OPT24.init(P24)
SS24 = state_specs(S24, SPEC24)


def clip_adamw_ref(p, s, g):
    n = optax.global_norm(g)
    g = jax.tree.map(lambda x: x * jnp.minimum(1.0, 0.5 / n), g)
    u, s = OPT24.update(g, s, p)
    return optax.apply_updates(p, u), s, n


def clip_adamw_sm(bug):
    def f(p, s, g):
        rep = dict(REPL24)
        if bug == "replicated-leaf-not-divided":
            rep["g"] = 1
        if bug == "fsdp-leaf-divided-by-dp":
            rep["emb"] = 4
        sq = sum(jnp.sum(jnp.square(g[k])) / rep[k] for k in g)
        n = jnp.sqrt(psum(sq, ("dp", "tp")))
        g = jax.tree.map(lambda x: x * jnp.minimum(1.0, 0.5 / n), g)
        u, s = OPT24.update(g, s, p)
        return optax.apply_updates(p, u), s, n
    return f


C.smap("s.clip_one_psum_adamw_mask.dp4xtp2", DT24, clip_adamw_sm, (SPEC24, SS24, SPEC24), (SPEC24, SS24, P()),
       clip_adamw_ref, (P24, S24, p24(0.3)),
       bugs=[("replicated-leaf-not-divided", ["wrong-scale"]), ("fsdp-leaf-divided-by-dp", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 25. Adafactor written with pmean of local means (equal shards), rows over
#     dp2 and columns over tp4, no update clipping, fixed lr, the factored
#     estimate as an outer product divided by the row-mean.


def adafactor_plain_ref(w, vr, vc, g):
    g2 = jnp.square(g) + 1e-30
    vr = 0.9 * vr + 0.1 * g2.mean(axis=1)
    vc = 0.9 * vc + 0.1 * g2.mean(axis=0)
    vhat = jnp.outer(vr, vc) / vr.mean()
    return w - 1e-2 * g / jnp.sqrt(vhat), vr, vc


def adafactor_plain_sm(bug):
    def f(w, vr, vc, g):
        g2 = jnp.square(g) + 1e-30
        vr = 0.9 * vr + 0.1 * pmean(g2.mean(axis=1), "tp")
        vc = 0.9 * vc + 0.1 * pmean(g2.mean(axis=0), "tp" if bug == "col-pmean-over-tp" else "dp")
        rmean = vr.mean() if bug == "row-mean-of-local-rows" else pmean(vr.mean(), "dp")
        vhat = jnp.outer(vr, vc) / rmean
        return w - 1e-2 * g / jnp.sqrt(vhat), vr, vc
    return f


C.smap("s.adafactor_pmean_of_means.dp2xtp4", DT, adafactor_plain_sm, (P("dp", "tp"), P("dp"), P("tp"), P("dp", "tp")),
       (P("dp", "tp"), P("dp"), P("tp")), adafactor_plain_ref, A3,
       bugs=[("col-pmean-over-tp", ["wrong-collective-group"]), ("row-mean-of-local-rows", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 26. LAMB-style trust ratio where the user all_gathers each tp-sharded leaf
#     and its update and takes jnp.linalg.norm of the full arrays (dp2 x
#     tp4; leaves replicated over dp).


def lamb_gather_ref(p, u):
    def one(x, d):
        pn, un = jnp.linalg.norm(x), jnp.linalg.norm(d)
        return x - 0.01 * d * jnp.where((pn == 0.0) | (un == 0.0), 1.0, pn / un)
    return jax.tree.map(one, p, u)


def lamb_gather_sm(bug):
    def f(p, u):
        def one(x, d, spec):
            ax = [i for i, a in enumerate(spec) if a is not None]
            if ax:
                axis_name = "dp" if bug == "gathered-over-dp" else "tp"
                xf = lax.all_gather(x, axis_name, axis=ax[0], tiled=True)
                df = d if bug == "update-not-gathered" else lax.all_gather(d, axis_name, axis=ax[0], tiled=True)
            else:
                xf, df = x, d
            pn, un = jnp.linalg.norm(xf), jnp.linalg.norm(df)
            return x - 0.01 * d * jnp.where((pn == 0.0) | (un == 0.0), 1.0, pn / un)
        return jax.tree.map(one, p, u, SPEC4, is_leaf=lambda z: isinstance(z, P) or hasattr(z, "shape"))
    return f


C.smap("s.lamb_trust_ratio_gathered_norms.dp2xtp4", DT, lamb_gather_sm, (SPEC4, SPEC4), SPEC4, lamb_gather_ref,
       (init4(), init4()), bugs=[("gathered-over-dp", ["wrong-collective-group"]),
                                 ("update-not-gathered", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 27. Muon on a tall weight (32 x 16) with its rows over tp4 (replicated over
#     dp2): the Gram matrix X^T X psum'd over tp, the quintic iteration in a
#     lax.fori_loop as X a + X (b A + c A A).


def ns_tall_loop(x, gram):
    def body(_, x):
        a = gram(x)
        return NS_A * x + x @ (NS_B * a + NS_C * a @ a)
    return lax.fori_loop(0, 5, body, x)


def muon_tall_ref(w, g):
    x = g / (jnp.linalg.norm(g) + 1e-7)
    return w - 0.02 * np.sqrt(2.0) * ns_tall_loop(x, lambda x: x.T @ x)


def muon_tall_sm(bug):
    def f(w, g):
        ax = ("dp", "tp") if bug == "gram-over-dp-tp" else "tp"
        x = g / (jnp.sqrt(psum(jnp.sum(g * g), "tp")) + 1e-7)
        if bug == "norm-after-iteration":
            o = ns_tall_loop(g, lambda x: psum(x.T @ x, ax)) / (jnp.sqrt(psum(jnp.sum(g * g), "tp")) + 1e-7)
        else:
            o = ns_tall_loop(x, lambda x: psum(x.T @ x, ax))
        return w - 0.02 * np.sqrt(2.0) * o
    return f


C.smap("s.muon_tall_rows_fori_loop.dp2xtp4", DT, muon_tall_sm, (P("tp", None), P("tp", None)), P("tp", None),
       muon_tall_ref, (R(32, 16, scale=0.3), R(32, 16, scale=0.1)),
       bugs=[("gram-over-dp-tp", ["wrong-collective-group"]), ("norm-after-iteration", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 28. the block-diagonal Shampoo of 9. written vectorised: the baseline
#     reshapes G into its 4 column blocks and builds all right statistics
#     with one einsum and their roots with jax.vmap; the body is the same as
#     9. with the block axis kept (size 1 per device).


def shampoo_vec_ref(w, lst, rst, x, e):
    g = jnp.einsum("bm,bn->mn", x, e) / x.shape[0]
    lst = lst + g @ g.T
    lq = inv_root4(lst + EPS9 * jnp.eye(16))
    gb = g.reshape(16, NB9, 8)
    rst = rst + jnp.einsum("mjk,mjl->jkl", gb, gb)
    rq = jax.vmap(inv_root4)(rst + EPS9 * jnp.eye(8))
    upd = jnp.einsum("mp,pjk,jkl->mjl", lq, gb, rq).reshape(16, 32)
    return w - LR9 * upd, lst, rst


def shampoo_vec_sm(bug):
    def f(w, lst, rst, x, e):
        g = psum(jnp.einsum("bm,bn->mn", x, e), "dp") / 16
        lst = lst + psum(g @ g.T, "tp")
        lq = inv_root4(lst + EPS9 * jnp.eye(16))
        gb = g.reshape(16, 1, 8)
        if bug == "right-stat-psummed":
            rst = rst + psum(jnp.einsum("mjk,mjl->jkl", gb, gb), "tp")
        else:
            rst = rst + jnp.einsum("mjk,mjl->jkl", gb, gb)
        rq = jax.vmap(inv_root4)(rst + EPS9 * jnp.eye(8))
        upd = jnp.einsum("mp,pjk,jkl->mjl", lq, gb, rq[..., ::-1] if bug == "right-root-columns-reversed" else rq).reshape(16, 8)
        return w - LR9 * upd, lst, rst
    return f


C.smap("s.shampoo_blockdiag_vectorised_vmap_roots.dp2xtp4", DT, shampoo_vec_sm,
       (P(None, "tp"), P(), P("tp"), P("dp"), P("dp", "tp")), (P(None, "tp"), P(), P("tp")), shampoo_vec_ref, A9,
       bugs=[("right-stat-psummed", ["wrong-collective-op"]), ("right-root-columns-reversed", ["wrong-permutation"])])

C.finish()
