"""samples/fresh138: a 138th batch of programs as a user writes them, on the theme of optimizers beyond plain AdamW on sharded parameters, written with optax or by hand in current JAX (LAMB / LARS per-layer trust ratios, Lion, factored Adafactor with RMS clipping and parameter scale, Muon-style Newton-Schulz orthogonalisation, SAM, EMA / Polyak averaging, per-layer gradient clipping, weight-decay masks, optax.multi_transform, MultiSteps accumulation, schedule-free AdamW).
The models: an MLP 16 -> 64 (gelu) -> 16 with biases and an MSE loss
(families 1-7, GSPMD 9 and 13), an embedding-bag in front of it (family 8),
and a tiny pre-norm transformer block (D=16, 4 causal heads of dim 4, MLP
64) for GSPMD pairs 10-12 and 14. Optimizer states are warmed by two or
three single-device steps (Lion's momentum is a restored state of the
gradients' scale). Gradients are written by hand where the forward pass
holds a collective: Megatron MLPs take the vjp of the local partial sums
with the output's cotangent; FSDP all_gathers the parameters and
psum_scatters the gradient of the gathered copy.
shard_map families (bugs in brackets):
 1. LAMB, FSDP (dp2 x fsdp4): optax scale_by_adam / add_decayed_weights on
    the shards, a hand-written trust ratio whose parameter and update norms
    psum the squares over fsdp, optax.lamb as the baseline. [the trust
    ratio from the local shard's norms; the parameter norm psum'd over dp.]
 2. LARS, Megatron MLP (dp2 x tp4): optax.lars' chain with a trust ratio
    whose norms psum over tp for the tp-sharded leaves, not for the
    replicated output bias. [the update norm from the local shard; the
    gradients psum'd over tp instead of dp.]
 3. Lion after clip-by-global-norm, FSDP (dp2 x fsdp4), written by hand
    against optax.lion. [the gradient not psum'd over dp; each replica's
    sign pmean'd over dp (1-bit sign compression) instead of the sign of
    the reduced interpolation.]
 4. Adafactor, FSDP (fsdp8), every parameter sharded on its larger dim:
    the factored statistic that is a mean over the sharded dim pmean'd,
    update clipping by block RMS and the parameter-scale RMS psum'd, written
    by hand against optax.adafactor(min_dim_size_to_factor=8). [the pmean
    applied to the other (local) factor; the clipping RMS of the local
    shard.]
 5. Muon, Megatron MLP (dp2 x tp4): Nesterov momentum, 5 Newton-Schulz
    steps on the column-sharded w1 and the row-sharded w2 (Gram matrices
    contract the sharded dim: psum over tp; Frobenius norm psum'd), SGD
    momentum for the biases. [the Gram matrices psum'd over dp; the squared
    Frobenius norm psum'd over every mesh axis (dp replicas counted twice).]
 6. SAM, FSDP (dp2 x fsdp4): gradient at w, perturbation rho g / ||g||
    with the global norm, gradient at the perturbed point, optax.sgd with
    momentum. [the perturbation from this replica's gradient before the dp
    reduction; ||g|| of the local shard.]
 7. per-layer gradient clipping by norm, SGD Nesterov and an EMA of the
    parameters, Megatron MLP (dp2 x tp4). [the replicated output bias's
    squared norm psum'd over tp as well; the sharded leaves' norms psum'd
    over dp instead of tp.]
 8. optax.MultiSteps(optax.multi_transform(adam for the embedding, adamw
    for the matrices, sgd momentum for the biases)), data parallel (dp4),
    the state at the mini-step that applies. [the embedding's gradient not
    pmean'd; the gradients psum'd instead of pmean'd.]
GSPMD pairs (jax.jit with NamedSharding in/out shardings; correct): 9.
optax.lamb, MLP (fsdp8); 10. optax.adafactor, transformer block (tp4); 11.
optax.contrib.schedule_free_adamw, block (dp2 x fsdp4); 12.
optax.contrib.muon, block (fsdp2 x tp4); 13. SAM + EMA by hand, MLP (dp2 x
tp4); 14. MultiSteps(multi_transform(lion, adam)) after clip_by_block_rms,
block (dp8).
Numerics: f32 throughout; correct pairs agree at about 1e-6; bug variants
differ clearly (1e-3 and more).
Run from the repository root: bash samples/gen/run_fresh138.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh138.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh138.py"
C = Corpus("samples/fresh138", SCRIPT, "samples/gen/run_fresh138.sh", sys.argv[1:])
rng, R, I = seeded(138138)
psum, pmean = lax.psum, lax.pmean
DI, H, DO = 16, 64, 16
B = 16          # global batch of the MLP families


# ---------------------------------------------------------------------------
# models


def mlp(p, x):
    return jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def sq_err(out, y):
    return jnp.sum(jnp.square(out - y))


def mlp_loss(p, x, y):
    return sq_err(mlp(p, x), y) / (x.shape[0] * DO)


def init_mlp():
    return {"w1": R(DI, H, scale=DI ** -0.5), "b1": R(H, scale=0.1),
            "w2": R(H, DO, scale=H ** -0.5), "b2": R(DO, scale=0.1)}


def mlp_data(n=B):
    x = R(n, DI)
    return x, (np.tanh(x @ R(DI, DO)) + 0.1 * R(n, DO)).astype(np.float32)


def matrices(p):
    """weight-decay mask: the matrices only, not the biases."""
    return jax.tree.map(lambda w: w.ndim == 2, p)


def opt_step(opt, loss=mlp_loss):
    """the single-device training step of an optax optimizer."""
    def step(params, state, x, y):
        lval, g = jax.value_and_grad(loss)(params, x, y)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, lval
    return step


def warm(step, params, state, n=2, data=mlp_data):
    """params and state after n single-device steps on fresh batches."""
    j = jax.jit(step)
    for _ in range(n):
        params, state, _ = j(params, state, *data())
    return jax.tree.map(np.asarray, params), jax.tree.map(np.asarray, state)


def specs_of(state, pspecs):
    return state_specs(state, pspecs)


# FSDP: each MLP parameter sharded on one dim (the larger one for matrices)
FS_DIM = {"w1": 1, "b1": 0, "w2": 0, "b2": 0}
FS_SPEC = {k: P(*([None] * d + ["fsdp"])) for k, d in FS_DIM.items()}


def gather(p):
    return {k: lax.all_gather(w, "fsdp", axis=FS_DIM[k], tiled=True) for k, w in p.items()}


def scatter(g):
    return {k: lax.psum_scatter(t, "fsdp", scatter_dimension=FS_DIM[k], tiled=True) for k, t in g.items()}


def fsdp_grad(p, x, y, dp=True, loss_axes=("dp", "fsdp")):
    """loss and gradient shards: the gathered copy's gradient of the local sum over the global
    count, psum_scatter'd over fsdp and (dp) psum'd over dp."""
    lsum, g = jax.value_and_grad(lambda q: sq_err(mlp(q, x), y) / (B * DO))(gather(p))
    g = scatter(g)
    return psum(lsum, loss_axes), (psum(g, "dp") if dp else g)


# Megatron tensor parallel MLP: w1 / b1 column-parallel, w2 row-parallel, b2 replicated
TP_SPEC = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}
TP_SHARDED = ("w1", "b1", "w2")


def tp_grad(p, x, y, red_axis="dp"):
    """loss and gradient on this tp shard: vjp of the local partial sum with the
    cotangent of the psum'd output; the sums over the batch psum'd over red_axis."""
    part = lambda q: jax.nn.gelu(x @ q["w1"] + q["b1"]) @ q["w2"]  # noqa: E731
    z, vjp = jax.vjp(part, {k: p[k] for k in TP_SHARDED})
    out = psum(z, "tp") + p["b2"]
    lsum, dout = jax.value_and_grad(lambda o: sq_err(o, y) / (B * DO))(out)
    g = dict(vjp(dout)[0], b2=jnp.sum(dout, 0))
    return psum(lsum, "dp"), psum(g, red_axis)


# ---------------------------------------------------------------------------
# 1. LAMB under FSDP: hand-written trust ratio with psum'd norms.
LR1, WD1 = 1e-2, 1e-2
LAMB1 = optax.lamb(LR1, b1=0.9, b2=0.999, eps=1e-6, weight_decay=WD1, mask=matrices)


def trust_ratio(sumsq, tc=1.0, eps=0.0):
    """optax.scale_by_trust_ratio on shards: sumsq(name, which, local sum of squares) -> global."""
    def update(updates, state, params):
        out = {}
        for k, u in updates.items():
            pn = jnp.sqrt(sumsq(k, "param", jnp.sum(params[k] * params[k])))
            un = jnp.sqrt(sumsq(k, "update", jnp.sum(u * u)))
            out[k] = u * jnp.where((pn == 0.0) | (un == 0.0), 1.0, tc * pn / (un + eps))
        return out, state
    return optax.GradientTransformation(lambda p: optax.EmptyState(), update)


def lamb_fsdp(bug):
    def sumsq(name, which, s):
        if bug == "local-trust-ratio":
            return s
        if bug == "param-norm-over-dp" and which == "param":
            return psum(s, "dp")
        return psum(s, "fsdp")
    opt = optax.chain(optax.scale_by_adam(b1=0.9, b2=0.999, eps=1e-6),
                      optax.add_decayed_weights(WD1, matrices), trust_ratio(sumsq),
                      optax.scale_by_learning_rate(LR1))

    def f(params, state, x, y):
        lval, g = fsdp_grad(params, x, y)
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, lval
    return f


P1, S1 = warm(opt_step(LAMB1), init_mlp(), LAMB1.init(init_mlp()))
SS1 = specs_of(S1, FS_SPEC)
C.smap("s.lamb_trust_ratio_fsdp_explicit_gather.dp2xfsdp4", {"dp": 2, "fsdp": 4}, lamb_fsdp,
       (FS_SPEC, SS1, P(("dp", "fsdp")), P(("dp", "fsdp"))), (FS_SPEC, SS1, P()), opt_step(LAMB1),
       (P1, S1) + mlp_data(),
       bugs=[("local-trust-ratio", ["local-statistic"]), ("param-norm-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 2. LARS on a Megatron MLP: norms psum'd over tp for the sharded leaves only.
LR2, WD2 = 0.02, 1e-3
LARS2 = optax.lars(LR2, weight_decay=WD2, weight_decay_mask=matrices, trust_coefficient=1.0, eps=0.0,
                   momentum=0.9)


def lars_tp(bug):
    def sumsq(name, which, s):
        if name not in TP_SHARDED or (bug == "local-update-norm" and which == "update"):
            return s
        return psum(s, "tp")
    opt = optax.chain(optax.add_decayed_weights(WD2, matrices), optax.masked(trust_ratio(sumsq), True),
                      optax.scale_by_learning_rate(LR2), optax.trace(decay=0.9, nesterov=False))

    def f(params, state, x, y):
        lval, g = tp_grad(params, x, y, "tp" if bug == "grad-reduce-over-tp" else "dp")
        u, state = opt.update(g, state, params)
        return optax.apply_updates(params, u), state, lval
    return f


P2, S2 = warm(opt_step(LARS2), init_mlp(), LARS2.init(init_mlp()))
SS2 = specs_of(S2, TP_SPEC)
C.smap("s.lars_trust_ratio_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, lars_tp,
       (TP_SPEC, SS2, P("dp"), P("dp")), (TP_SPEC, SS2, P()), opt_step(LARS2), (P2, S2) + mlp_data(),
       bugs=[("local-update-norm", ["local-statistic"]), ("grad-reduce-over-tp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. Lion after clip_by_global_norm under FSDP, by hand.
LR3, WD3, CLIP3, B1_3, B2_3 = 3e-3, 0.1, 0.05, 0.9, 0.99
LION3 = optax.chain(optax.clip_by_global_norm(CLIP3),
                    optax.lion(LR3, b1=B1_3, b2=B2_3, weight_decay=WD3, mask=matrices))


def lion_fsdp(bug):
    def f(params, state, x, y):
        clip_state, (lion_state, wd_state, lr_state) = state
        lval, g = fsdp_grad(params, x, y, dp=False)
        if bug == "sign-then-pmean":
            g = jax.tree.map(lambda t: 2.0 * t, g)           # this replica's estimate of the gradient
        elif bug != "no-dp-reduce":
            g = psum(g, "dp")
        gn = jnp.sqrt(psum(sum(jnp.sum(t * t) for t in g.values()), "fsdp"))
        g = jax.tree.map(lambda t: jnp.where(gn < CLIP3, t, t / gn * CLIP3), g)
        mu = lion_state.mu
        sgn = jax.tree.map(lambda t, m: jnp.sign((1.0 - B1_3) * t + B1_3 * m), g, mu)
        if bug == "sign-then-pmean":
            sgn = pmean(sgn, "dp")
            g = pmean(g, "dp")
        mu = jax.tree.map(lambda t, m: (1.0 - B2_3) * t + B2_3 * m, g, mu)
        new = {k: w - LR3 * (sgn[k] + (WD3 * w if w.ndim == 2 else 0.0)) for k, w in params.items()}
        lion_state = lion_state._replace(count=lion_state.count + 1, mu=mu)
        return new, (clip_state, (lion_state, wd_state, lr_state)), lval
    return f


P3 = init_mlp()
S3 = LION3.init(P3)
S3 = (S3[0], (S3[1][0]._replace(mu={k: R(*np.shape(w), scale=1.5e-4) for k, w in P3.items()}),) + S3[1][1:])
P3, S3 = warm(opt_step(LION3), P3, S3, n=1)
SS3 = specs_of(S3, FS_SPEC)
C.smap("s.lion_clip_global_norm_fsdp.dp2xfsdp4", {"dp": 2, "fsdp": 4}, lion_fsdp,
       (FS_SPEC, SS3, P(("dp", "fsdp")), P(("dp", "fsdp"))), (FS_SPEC, SS3, P()), opt_step(LION3),
       (P3, S3) + mlp_data(),
       bugs=[("no-dp-reduce", ["missing-all-reduce"]), ("sign-then-pmean", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 4. Adafactor under FSDP (fsdp8), factored second moments by hand.
LR4, CLIP4, EPS4 = 1e-2, 0.5, 1e-30
ADAF4 = optax.adafactor(LR4, min_dim_size_to_factor=8, decay_rate=0.8, clipping_threshold=CLIP4,
                        multiply_by_parameter_scale=True, eps=EPS4)
NGLOB4 = {"w1": DI * H, "b1": H, "w2": H * DO, "b2": DO}


def adafactor_fsdp(bug):
    def rms(name, t, local=False):
        s = jnp.sum(t * t)
        return jnp.sqrt((s if local else psum(s, "fsdp")) / (NGLOB4[name] / (8 if local else 1)))

    def f(params, state, x, y):
        fs, rest = state[0], state[1:]
        lval, g = fsdp_grad(params, x, y, dp=False, loss_axes="fsdp")
        dt = 1.0 - (fs.count + 1).astype(jnp.float32) ** -0.8
        v_row, v_col, v, upd = {}, {}, {}, {}
        for k, t in g.items():
            gsq = t * t + EPS4
            v_row[k] = v_col[k] = v[k] = jnp.zeros((1,), t.dtype)   # the unused slots, as optax resets them
            if t.ndim == 2:
                d0 = FS_DIM[k]            # the larger dim, the sharded one
                d1 = 1 - d0
                over_sharded = jnp.mean(gsq, axis=d0)   # a mean over the sharded dim: pmean'd
                over_local = jnp.mean(gsq, axis=d1)
                if bug == "pmean-the-local-factor":
                    over_local = pmean(over_local, "fsdp")
                else:
                    over_sharded = pmean(over_sharded, "fsdp")
                v_row[k] = dt * fs.v_row[k] + (1.0 - dt) * over_sharded
                v_col[k] = dt * fs.v_col[k] + (1.0 - dt) * over_local
                row_factor = (v_row[k] / jnp.mean(v_row[k])) ** -0.5
                u = t * jnp.expand_dims(row_factor, d0) * jnp.expand_dims(v_col[k] ** -0.5, d1)
            else:
                v[k] = dt * fs.v[k] + (1.0 - dt) * gsq
                u = t * v[k] ** -0.5
            u = u / jnp.maximum(1.0, rms(k, u, local=bug == "clip-rms-local") / CLIP4)
            upd[k] = -(u * LR4 * jnp.maximum(rms(k, params[k]), 1e-3))
        fs = fs._replace(count=fs.count + 1, v_row=v_row, v_col=v_col, v=v)
        return optax.apply_updates(params, upd), (fs,) + rest, lval
    return f


def adafactor_specs(state, pspecs):
    """v_col of a factored matrix (its mean over the other dim) and v of a vector sharded like it."""
    def spec(path, leaf):
        names = [getattr(k, "name", None) for k in path]
        key = path[-1].key if isinstance(path[-1], jax.tree_util.DictKey) else None
        if "v_col" in names and np.ndim(leaf) == 1 and np.size(leaf) == H:
            return P("fsdp")
        if "v" in names and key in ("b1", "b2"):
            return pspecs[key]
        return P()
    return jax.tree_util.tree_map_with_path(spec, state)


P4, S4 = warm(opt_step(ADAF4), init_mlp(), ADAF4.init(init_mlp()))
SS4 = adafactor_specs(S4, FS_SPEC)
C.smap("s.adafactor_factored_rms_fsdp_rows.fsdp8", {"fsdp": 8}, adafactor_fsdp,
       (FS_SPEC, SS4, P("fsdp"), P("fsdp")), (FS_SPEC, SS4, P()), opt_step(ADAF4), (P4, S4) + mlp_data(),
       bugs=[("pmean-the-local-factor", ["wrong-reduction"]), ("clip-rms-local", ["local-statistic"])])

# ---------------------------------------------------------------------------
# 5. Muon on a Megatron MLP: Newton-Schulz with Gram matrices over the sharded dim.
NS_ABC = (3.4445, -4.7750, 2.0315)
LR5, LR5B, BETA5, WD5 = 0.02, 0.05, 0.95, 0.01
SHAPE5 = {"w1": (DI, H), "w2": (H, DO)}


def newton_schulz(g, shape, red_gram, red_norm, steps=5):
    """orthogonalise g (a shard of a matrix of the global shape): Gram matrices over the shorter side."""
    a, b, c = NS_ABC
    x = g / (jnp.sqrt(red_norm(jnp.sum(g * g))) + 1e-7)
    tall = shape[0] > shape[1]
    if tall:
        x = x.T
    for _ in range(steps):
        A = red_gram(x @ x.T)
        x = a * x + (b * A + c * A @ A) @ x
    return x.T if tall else x


def muon_update(params, mom, g, red_gram, red_norm):
    mom = jax.tree.map(lambda m, t: BETA5 * m + t, mom, g)
    new = {}
    for k, w in params.items():
        if k in SHAPE5:
            o = newton_schulz(g[k] + BETA5 * mom[k], SHAPE5[k], red_gram, red_norm)
            scale = max(1.0, SHAPE5[k][0] / SHAPE5[k][1]) ** 0.5
            new[k] = w - LR5 * (o * scale + WD5 * w)
        else:
            new[k] = w - LR5B * mom[k]
    return new, mom


def muon_ref(params, mom, x, y):
    lval, g = jax.value_and_grad(mlp_loss)(params, x, y)
    new, mom = muon_update(params, mom, g, lambda t: t, lambda t: t)
    return new, mom, lval


def muon_tp(bug):
    def f(params, mom, x, y):
        lval, g = tp_grad(params, x, y)
        red_gram = (lambda t: psum(t, "dp")) if bug == "gram-psum-over-dp" else (lambda t: psum(t, "tp"))
        red_norm = (lambda t: psum(t, ("dp", "tp"))) if bug == "norm-psum-all-axes" else (lambda t: psum(t, "tp"))
        new, mom = muon_update(params, mom, g, red_gram, red_norm)
        return new, mom, lval
    return f


P5 = init_mlp()
M5 = jax.tree.map(np.zeros_like, P5)
for _ in range(2):
    P5, M5, _ = jax.jit(muon_ref)(P5, M5, *mlp_data())
P5, M5 = jax.tree.map(np.asarray, P5), jax.tree.map(np.asarray, M5)
C.smap("s.muon_newton_schulz_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, muon_tp,
       (TP_SPEC, TP_SPEC, P("dp"), P("dp")), (TP_SPEC, TP_SPEC, P()), muon_ref, (P5, M5) + mlp_data(),
       bugs=[("gram-psum-over-dp", ["wrong-axis"]), ("norm-psum-all-axes", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 6. SAM under FSDP: gradient at the perturbed point w + rho g / ||g||.
RHO6 = 0.05
SGD6 = optax.sgd(0.05, momentum=0.9)


def sam_ref(params, state, x, y):
    lval, g = jax.value_and_grad(mlp_loss)(params, x, y)
    n = optax.global_norm(g)
    e = jax.tree.map(lambda t: RHO6 * t / (n + 1e-12), g)
    g2 = jax.grad(mlp_loss)(optax.apply_updates(params, e), x, y)
    u, state = SGD6.update(g2, state, params)
    return optax.apply_updates(params, u), state, lval


def sam_fsdp(bug):
    def f(params, state, x, y):
        lval, g = fsdp_grad(params, x, y, dp=bug != "perturb-before-dp-reduce")
        if bug == "perturb-before-dp-reduce":
            g = jax.tree.map(lambda t: 2.0 * t, g)   # this replica's gradient of its own half
        s = sum(jnp.sum(t * t) for t in g.values())
        n = jnp.sqrt(s if bug == "norm-local-shard" else psum(s, "fsdp"))
        e = jax.tree.map(lambda t: RHO6 * t / (n + 1e-12), g)
        _, g2 = fsdp_grad(optax.apply_updates(params, e), x, y)
        u, state = SGD6.update(g2, state, params)
        return optax.apply_updates(params, u), state, lval
    return f


P6, S6 = warm(sam_ref, init_mlp(), SGD6.init(init_mlp()))
SS6 = specs_of(S6, FS_SPEC)
C.smap("s.sam_global_norm_perturbation_fsdp.dp2xfsdp4", {"dp": 2, "fsdp": 4}, sam_fsdp,
       (FS_SPEC, SS6, P(("dp", "fsdp")), P(("dp", "fsdp"))), (FS_SPEC, SS6, P()), sam_ref,
       (P6, S6) + mlp_data(),
       bugs=[("perturb-before-dp-reduce", ["missing-all-reduce"]), ("norm-local-shard", ["local-statistic"])])

# ---------------------------------------------------------------------------
# 7. per-layer clipping by norm, SGD Nesterov, EMA of the parameters (Megatron MLP).
CLIP7, EMA7 = 0.02, 0.99
SGD7 = optax.sgd(0.1, momentum=0.9, nesterov=True)


def clip_layers(g, sumsq):
    return {k: t * jnp.minimum(1.0, CLIP7 / (jnp.sqrt(sumsq(k, jnp.sum(t * t))) + 1e-6)) for k, t in g.items()}


def clip_ema_ref(params, state, ema, x, y):
    lval, g = jax.value_and_grad(mlp_loss)(params, x, y)
    u, state = SGD7.update(clip_layers(g, lambda k, s: s), state, params)
    params = optax.apply_updates(params, u)
    ema = jax.tree.map(lambda e, w: EMA7 * e + (1.0 - EMA7) * w, ema, params)
    return params, state, ema, lval


def clip_ema_tp(bug):
    def sumsq(k, s):
        if k in TP_SHARDED:
            return psum(s, "dp" if bug == "layer-norm-psum-dp" else "tp")
        return psum(s, "tp") if bug == "bias-norm-psum-tp" else s

    def f(params, state, ema, x, y):
        lval, g = tp_grad(params, x, y)
        u, state = SGD7.update(clip_layers(g, sumsq), state, params)
        params = optax.apply_updates(params, u)
        ema = jax.tree.map(lambda e, w: EMA7 * e + (1.0 - EMA7) * w, ema, params)
        return params, state, ema, lval
    return f


P7 = init_mlp()
S7 = SGD7.init(P7)
E7 = jax.tree.map(np.copy, P7)
for _ in range(2):
    P7, S7, E7, _ = jax.jit(clip_ema_ref)(P7, S7, E7, *mlp_data())
P7, S7, E7 = (jax.tree.map(np.asarray, t) for t in (P7, S7, E7))
SS7 = specs_of(S7, TP_SPEC)
C.smap("s.per_layer_clip_sgd_nesterov_ema_megatron.dp2xtp4", {"dp": 2, "tp": 4}, clip_ema_tp,
       (TP_SPEC, SS7, TP_SPEC, P("dp"), P("dp")), (TP_SPEC, SS7, TP_SPEC, P()), clip_ema_ref,
       (P7, S7, E7) + mlp_data(),
       bugs=[("bias-norm-psum-tp", ["wrong-scale"]), ("layer-norm-psum-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 8. MultiSteps(multi_transform(...)) with weight-decay masks, data parallel.
V8, BAG8 = 32, 4
LABELS8 = {"embed": "emb", "w1": "mat", "w2": "mat", "b1": "bias", "b2": "bias"}
OPT8 = optax.MultiSteps(optax.multi_transform({"emb": optax.adam(3e-3),
                                               "mat": optax.adamw(3e-3, weight_decay=0.1),
                                               "bias": optax.sgd(0.05, momentum=0.9)}, LABELS8),
                        every_k_schedule=2)


def bag_loss(p, ids, y):
    h = jnp.mean(jnp.take(p["embed"], ids, axis=0), 1)
    return mlp_loss(p, h, y)


def bag_data(n=B):
    ids = I(0, V8, n, BAG8)
    return ids, (0.5 * R(n, DO)).astype(np.float32)


def multi_dp(bug):
    def f(params, state, ids, y):
        lval, g = jax.value_and_grad(bag_loss)(params, ids, y)
        if bug == "psum-not-pmean":
            g = psum(g, "dp")
        else:
            g = {k: (t if (bug == "embed-grad-not-reduced" and k == "embed") else pmean(t, "dp"))
                 for k, t in g.items()}
        u, state = OPT8.update(g, state, params)
        return optax.apply_updates(params, u), state, pmean(lval, "dp")
    return f


P8 = dict(init_mlp(), embed=R(V8, DI, scale=0.5))
P8, S8 = warm(opt_step(OPT8, bag_loss), P8, OPT8.init(P8), n=3, data=bag_data)
C.smap("s.multisteps_multi_transform_groups.dp4", {"dp": 4}, multi_dp,
       (P(), P(), P("dp"), P("dp")), (P(), P(), P()), opt_step(OPT8, bag_loss), (P8, S8) + bag_data(),
       bugs=[("embed-grad-not-reduced", ["missing-all-reduce"]), ("psum-not-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
BB, TT, NH = 8, 8, 4


def block(p, x):
    def ln(t, g):
        return t * lax.rsqrt(jnp.mean(t * t, -1, keepdims=True) + 1e-5) * g
    Bn, T, Dm = x.shape
    h = ln(x, p["ln1"])
    q, k, v = ((h @ p[n]).reshape(Bn, T, NH, Dm // NH) for n in ("wq", "wk", "wv"))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(Dm // NH)
    s = jnp.where(jnp.tril(jnp.ones((T, T), bool)), s, -1e9)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(Bn, T, Dm)
    x = x + o @ p["wo"]
    return x + jax.nn.gelu(ln(x, p["ln2"]) @ p["w1"]) @ p["w2"]


def block_loss(p, x, y):
    return jnp.mean(jnp.square(block(p, x) - y))


def init_block():
    s = DI ** -0.5
    return {"ln1": 1.0 + R(DI, scale=0.1), "wq": R(DI, DI, scale=s), "wk": R(DI, DI, scale=s),
            "wv": R(DI, DI, scale=s), "wo": R(DI, DI, scale=s), "ln2": 1.0 + R(DI, scale=0.1),
            "w1": R(DI, H, scale=s), "w2": R(H, DI, scale=H ** -0.5)}


def block_data(n=BB):
    x = R(n, TT, DI)
    return x, (0.5 * np.roll(x, 1, 1) + 0.1 * R(n, TT, DI)).astype(np.float32)


BLK_TP = {"ln1": P(), "ln2": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"),
          "wo": P("tp", None), "w1": P(None, "tp"), "w2": P("tp", None)}
BLK_FSDP = {"ln1": P("fsdp"), "ln2": P("fsdp"), "wq": P("fsdp", None), "wk": P("fsdp", None),
            "wv": P("fsdp", None), "wo": P(None, "fsdp"), "w1": P("fsdp", None), "w2": P(None, "fsdp")}
BLK_FSDP_TP = {"ln1": P(), "ln2": P(), "wq": P("fsdp", "tp"), "wk": P("fsdp", "tp"), "wv": P("fsdp", "tp"),
               "wo": P("tp", "fsdp"), "w1": P("fsdp", "tp"), "w2": P("tp", "fsdp")}


def gspmd_opt(name, mesh, opt, pspec, bspec, init, data, loss, sspec=None, nwarm=2):
    params, state = warm(opt_step(opt, loss), init(), opt.init(init()), n=nwarm, data=data)
    ss = sspec(state) if sspec else specs_of(state, pspec)
    C.gspmd(name, mesh, (pspec, ss, bspec, bspec), (pspec, ss, P()), opt_step(opt, loss),
            (params, state) + data())


# 9. optax.lamb on the MLP, FSDP.
gspmd_opt("g.lamb_mlp_fsdp.fsdp8", {"fsdp": 8}, optax.lamb(1e-2, weight_decay=1e-2, mask=matrices), FS_SPEC,
          P("fsdp"), init_mlp, mlp_data, mlp_loss)
# 10. optax.adafactor (factored) on the block, tensor parallel; the state replicated.
gspmd_opt("g.adafactor_factored_block.tp4", {"tp": 4},
          optax.adafactor(1e-2, min_dim_size_to_factor=8, clipping_threshold=1.0), BLK_TP, P(),
          init_block, block_data, block_loss, sspec=lambda s: jax.tree.map(lambda _: P(), s))
# 11. schedule-free AdamW on the block, dp x fsdp.
gspmd_opt("g.schedule_free_adamw_block.dp2xfsdp4", {"dp": 2, "fsdp": 4},
          optax.contrib.schedule_free_adamw(1e-2, warmup_steps=2, weight_decay=1e-2), BLK_FSDP,
          P(("dp", "fsdp")), init_block, block_data, block_loss)
# 12. optax.contrib.muon (Newton-Schulz on the matrices, adam on the norms' gains), fsdp x tp.
gspmd_opt("g.muon_block.fsdp2xtp4", {"fsdp": 2, "tp": 4}, optax.contrib.muon(1e-2, weight_decay=1e-2),
          BLK_FSDP_TP, P("fsdp"), init_block, block_data, block_loss)
# 13. SAM + EMA by hand on the Megatron-sharded MLP.
P13 = init_mlp()
S13 = SGD6.init(P13)
P13, S13 = warm(sam_ref, P13, S13)


def sam_ema_step(params, state, ema, x, y):
    params, state, lval = sam_ref(params, state, x, y)
    return params, state, jax.tree.map(lambda e, w: 0.995 * e + 0.005 * w, ema, params), lval


SS13 = specs_of(S13, TP_SPEC)
C.gspmd("g.sam_ema_mlp_megatron.dp2xtp4", {"dp": 2, "tp": 4}, (TP_SPEC, SS13, TP_SPEC, P("dp"), P("dp")),
        (TP_SPEC, SS13, TP_SPEC, P()), sam_ema_step, (P13, S13, jax.tree.map(np.copy, P13)) + mlp_data())
# 14. MultiSteps(multi_transform(lion for matrices, adam for gains)) after clip_by_block_rms, dp8.
OPT14 = optax.MultiSteps(optax.chain(optax.clip_by_block_rms(0.05), optax.multi_transform(
    {"lion": optax.lion(1e-3, weight_decay=0.1), "adam": optax.adam(1e-3)},
    lambda p: jax.tree.map(lambda w: "lion" if w.ndim == 2 else "adam", p))), every_k_schedule=2)
gspmd_opt("g.multisteps_lion_adam_block_rms_clip.dp8", {"dp": 8}, OPT14,
          jax.tree.map(lambda _: P(), BLK_TP, is_leaf=lambda s: isinstance(s, P)), P("dp"), init_block,
          block_data, block_loss, nwarm=3)

C.finish()
