"""samples/fresh90: a 90th batch of programs as a user writes them, on the
theme of trajectory optimisation and differentiable control under sharding in
current JAX / optax, none of them an idiom of samples/fresh .. fresh26, probe,
train or wild.
Conventions: a damped pendulum-like point mass, state (p1, p2, v1, v2), action
(a1, a2), Euler steps of dt = 0.1; a quadratic stage cost and a terminal cost;
action sequences (batch, horizon, action); rollouts with lax.scan over time.
shard_map families (bugs in brackets):
 1. MPC shooting: the cost of a batch of action sequences from a batch of
    initial states over dp4, scanned over the horizon, per-state cost and the
    batch mean (psum / B). [the horizon reversed (scan with reverse=True),
    the mean of the local batch only].
 2. gradient-based trajectory optimisation: 3 steps of plain gradient descent
    on the action sequences (gradient of the global batch mean), batch over
    dp4. [gradient of the local mean (x4), gradients psum'd over dp].
 3. the cross-entropy method, population of 64 sampled sequences over pop8
    (noise passed in), 2 iterations: elites = top_k over the all_gather'd
    global costs, a device keeps its samples at or under the k-th cost, mean
    and std refitted with psums. [elites from the local population, the std
    around the old mean].
 4. MPPI, population over (dp2 x tp4): the baseline cost pmin'd over both
    axes, weights exp(-(c - min) / lambda) normalised by a psum over both
    axes. [weights normalised per device (pmean of local averages), the
    baseline from the local minimum, the denominator psum'd over tp only].
 5. an iLQR-style backward pass (Riccati recursion, lax.scan reverse=True,
    jnp.linalg.solve of the 2x2 Quu) on time-varying linearisations, batch of
    systems over dp4, then the closed-loop forward pass and the pmean'd
    cost. [the recursion accumulated forward in time, the gains returned in
    reversed time order].
 6. a learned dynamics model, a tensor-parallel MLP (column-parallel W1, row-
    parallel W2, psum) rolled out over the horizon, batch over dp2 x tp4.
    [the row-parallel psum missing, the output bias added before the psum].
 7. a training step of that model (2-step rollout loss, check_vma=True,
    loss pmean'd over dp, jax.grad, optax.sgd with momentum) under dp2 x tp4.
    [the loss not pmean'd over dp (gradient summed), pmean instead of psum in
    the row-parallel layer].
 8. a discounted cost-to-go along a horizon of 16 sharded over sp4: a local
    reverse discounted cumsum (as a matrix) plus a carry of the later blocks'
    totals by all_gather. [the carry taken from the earlier blocks (the
    wrong direction), the carry not discounted to the position].
 9. receding-horizon MPC in closed loop: 3 control steps, each one gradient
    step on the warm-started plan, the first action applied, the plan shifted
    left with a zero appended; batch over dp4. [the plan shifted the wrong
    way, the last action applied].
10. the CEM written the other way: every device all_gathers the samples
    and the costs, takes the global top_k indices (jnp.take) and refits
    redundantly. [top_k of the local costs used as indices into the
    gathered samples, the std with ddof=1].
11. MPPI per initial state: states over dp2, each state's population of 16
    over tp4, the stabilising max pmax'd over tp and the weights normalised
    by a psum over tp. [the denominator not psum'd, the max pmax'd over dp].
12. trajectory optimisation through the tensor-parallel learned dynamics
    in shard_map (check_vma=True): states over dp2, hidden units over tp4,
    the batch-mean cost pmean'd over dp, 3 optax.sgd (momentum) steps on the
    actions by jax.grad. [the output bias added before the psum, the cost
    not pmean'd over dp (gradients twice as large)].
13. the discounted cost-to-go of 8. with block reverse scans and the carry
    passed right to left by a chain of 3 ppermutes. [the chain in the wrong
    direction, the carry discounted by gamma^(L-1) per block].
14. the learned dynamics in bf16 (f32 accumulation) rolled out over 4
    unrolled steps, hidden units over tp4, batch over dp2, the row-parallel
    reduction as psum_scatter over the state dim + tiled all_gather. [the
    rank's slice all_gather'd without a reduction, the all_gather along the
    batch axis then reshaped].
GSPMD pairs (correct only): 15. the CEM of 3. with the population over pop8;
16. MPPI of 4. over dp2 x tp4 (two iterations); 17. trajectory optimisation
with optax.adam through the learned MLP dynamics, batch over dp and hidden
units over tp; 18. the backward pass of 5. with the batch over dp4;
19. an optax.adamw training step of the dynamics model, batch over dp and
hidden units over tp.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh90.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh90.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh90.py"
C = Corpus("samples/fresh90", SCRIPT, "samples/gen/run_fresh90.sh", sys.argv[1:])
rng, R, I = seeded(9090)
psum, pmean, pmin, idx = lax.psum, lax.pmean, lax.pmin, lax.axis_index

S, A, H, DT = 4, 2, 6, 0.1
QW = jnp.array([1.0, 1.0, 0.1, 0.1])
RW = 0.05


def dyn(x, u):
    p, v = x[..., :2], x[..., 2:]
    v = v + DT * (jnp.tanh(u) * 2.0 - 0.1 * v - 0.5 * jnp.sin(p))
    return jnp.concatenate([p + DT * v, v], -1)


def stage(x, u):
    return jnp.sum(QW * x * x, -1) + RW * jnp.sum(u * u, -1)


def term(x):
    return 5.0 * jnp.sum(x[..., :2] ** 2, -1)


def rollout_cost(x0, U, reverse=False):
    """x0 (..., S), U (..., H, A): total cost (...)."""
    def step(x, u):
        return dyn(x, u), stage(x, u)
    x0 = jnp.broadcast_to(x0, U.shape[:-2] + x0.shape[-1:])
    xT, cs = lax.scan(step, x0, jnp.moveaxis(U, -2, 0), reverse=reverse)
    return jnp.sum(cs, 0) + term(xT)


# ---------------------------------------------------------------------------
# 1. MPC shooting over a batch of initial states (dp4)
B1 = 16


def shoot_ref(x0, U):
    c = rollout_cost(x0, U)
    return c, jnp.mean(c)


def shoot(bug):
    def f(x0, U):
        c = rollout_cost(x0, U, reverse=(bug == "horizon-reversed"))
        m = jnp.mean(c) if bug == "local-mean" else psum(jnp.sum(c), "dp") / B1
        return c, m
    return f


C.smap("s.mpc_shooting_cost_scan.dp4", {"dp": 4}, shoot, (P("dp"), P("dp")), (P("dp"), P()), shoot_ref,
       (R(B1, S), R(B1, H, A, scale=0.5)),
       bugs=[("horizon-reversed", ["wrong-order"]), ("local-mean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 2. gradient trajectory optimisation, 3 GD steps on the actions (dp4)
LR2 = 4.0


def gdopt_ref(x0, U):
    for _ in range(3):
        g = jax.grad(lambda U: jnp.mean(rollout_cost(x0, U)))(U)
        U = U - LR2 * g
    return U, jnp.mean(rollout_cost(x0, U))


def gdopt(bug):
    def f(x0, U):
        for _ in range(3):
            if bug == "local-mean-grad":
                g = jax.grad(lambda U: jnp.mean(rollout_cost(x0, U)))(U)
            else:
                g = jax.grad(lambda U: jnp.sum(rollout_cost(x0, U)) / B1)(U)
            if bug == "grad-psummed":
                g = psum(g, "dp")
            U = U - LR2 * g
        return U, pmean(jnp.mean(rollout_cost(x0, U)), "dp")
    return f


C.smap("s.trajopt_gd_steps_actions.dp4", {"dp": 4}, gdopt, (P("dp"), P("dp")), (P("dp"), P()), gdopt_ref,
       (R(B1, S), R(B1, H, A, scale=0.3)),
       bugs=[("local-mean-grad", ["wrong-scale"]), ("grad-psummed", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. CEM, population over pop8, elites by top_k over the global population
N3, K3, IT3 = 64, 8, 2


def cem_ref(x0, mu, sig, eps):
    for it in range(IT3):
        U = mu + sig * eps[it]
        c = rollout_cost(x0, U)
        _, ix = lax.top_k(-c, K3)
        el = U[ix]
        mu, sig = jnp.mean(el, 0), jnp.std(el, 0) + 1e-3
    return mu, sig


def cem(bug):
    def f(x0, mu, sig, eps):
        n = 8
        for it in range(IT3):
            U = mu + sig * eps[it]
            c = rollout_cost(x0, U)
            if bug == "local-elites":
                thr = -lax.top_k(-c, K3 // n)[0][-1]
            else:
                thr = -lax.top_k(-lax.all_gather(c, "pop", tiled=True), K3)[0][-1]
            m = (c <= thr).astype(U.dtype)[:, None, None]
            new_mu = psum(jnp.sum(m * U, 0), "pop") / K3
            ctr = mu if bug == "std-around-old-mean" else new_mu
            var = psum(jnp.sum(m * (U - ctr) ** 2, 0), "pop") / K3
            mu, sig = new_mu, jnp.sqrt(var) + 1e-3
        return mu, sig
    return f


X3 = R(S)
MU3, SIG3, EPS3 = R(H, A, scale=0.2), np.full((H, A), 0.8, np.float32), R(IT3, N3, H, A)
C.smap("s.cem_global_topk_elites.pop8", {"pop": 8}, cem, (P(), P(), P(), P(None, "pop")), (P(), P()), cem_ref,
       (X3, MU3, SIG3, EPS3),
       bugs=[("local-elites", ["wrong-collective-group"]), ("std-around-old-mean", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 4. MPPI, population over dp2 x tp4
N4, LAM4 = 64, 0.5


def mppi_ref(x0, U, eps):
    c = rollout_cost(x0, U + eps)
    w = jnp.exp(-(c - jnp.min(c)) / LAM4)
    w = w / jnp.sum(w)
    return U + jnp.einsum("n,nha->ha", w, eps)


def mppi(bug):
    ax = ("dp", "tp")

    def f(x0, U, eps):
        c = rollout_cost(x0, U + eps)
        base = jnp.min(c) if bug == "local-min-baseline" else pmin(jnp.min(c), ax)
        w = jnp.exp(-(c - base) / LAM4)
        num = jnp.einsum("n,nha->ha", w, eps)
        if bug == "per-device-normalisation":
            return U + pmean(num / jnp.sum(w), ax)
        den = psum(jnp.sum(w), "tp" if bug == "den-over-tp-only" else ax)
        return U + psum(num, ax) / den
    return f


C.smap("s.mppi_weights_global_norm.dp2xtp4", {"dp": 2, "tp": 4}, mppi, (P(), P(), P(("dp", "tp"))), P(), mppi_ref,
       (R(S), R(H, A, scale=0.2), R(N4, H, A, scale=0.7)),
       bugs=[("per-device-normalisation", ["wrong-reduction"]), ("local-min-baseline", ["missing-all-reduce"]),
             ("den-over-tp-only", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 5. iLQR-style backward pass (Riccati), batch of systems over dp4
B5, H5 = 8, 5
Q5 = np.diag([1.0, 1.0, 0.1, 0.1]).astype(np.float32)
R5 = (0.1 * np.eye(A)).astype(np.float32)
QF5 = (5.0 * np.eye(S)).astype(np.float32)


def riccati(As, Bs, Q, Rr, Qf, reverse=True):
    def step(V, ab):
        a, b = ab
        quu = Rr + b.T @ V @ b
        qux = b.T @ V @ a
        K = -jnp.linalg.solve(quu, qux)
        Vn = Q + a.T @ V @ a + qux.T @ K
        return 0.5 * (Vn + Vn.T), K
    V0, Ks = lax.scan(step, Qf, (As, Bs), reverse=reverse)
    return V0, Ks


def closed_loop(As, Bs, Ks, x0, Q, Rr, Qf):
    def step(x, abk):
        a, b, k = abk
        u = k @ x
        return a @ x + b @ u, x @ Q @ x + u @ Rr @ u
    xT, cs = lax.scan(step, x0, (As, Bs, Ks))
    return jnp.sum(cs) + xT @ Qf @ xT


def ilqr_ref(As, Bs, x0, Q, Rr, Qf):
    V0, Ks = jax.vmap(lambda a, b: riccati(a, b, Q, Rr, Qf))(As, Bs)
    J = jax.vmap(lambda a, b, k, x: closed_loop(a, b, k, x, Q, Rr, Qf))(As, Bs, Ks, x0)
    return Ks, V0, jnp.mean(J)


def ilqr(bug):
    def f(As, Bs, x0, Q, Rr, Qf):
        V0, Ks = jax.vmap(lambda a, b: riccati(a, b, Q, Rr, Qf, reverse=(bug != "forward-accumulation")))(As, Bs)
        if bug == "gains-time-flipped":
            Ks = Ks[:, ::-1]
        J = jax.vmap(lambda a, b, k, x: closed_loop(a, b, k, x, Q, Rr, Qf))(As, Bs, Ks, x0)
        return Ks, V0, pmean(jnp.mean(J), "dp")
    return f


AS5 = (np.eye(S) + 0.1 * R(B5, H5, S, S, scale=1.0)).astype(np.float32)
BS5 = R(B5, H5, S, A, scale=0.3)
C.smap("s.ilqr_riccati_backward_solve.dp4", {"dp": 4}, ilqr, (P("dp"), P("dp"), P("dp"), P(), P(), P()),
       (P("dp"), P("dp"), P()), ilqr_ref, (AS5, BS5, R(B5, S), Q5, R5, QF5),
       bugs=[("forward-accumulation", ["wrong-order"]), ("gains-time-flipped", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 6. learned dynamics, tensor-parallel MLP rollout (dp2 x tp4)
HD = 32


def mlp_step(p, x, u, tp_reduce=lambda y: y, bias_first=False):
    h = jax.nn.gelu(jnp.concatenate([x, u], -1) @ p["w1"] + p["b1"])
    y = h @ p["w2"]
    if bias_first:
        return x + tp_reduce(y + p["b2"])
    return x + tp_reduce(y) + p["b2"]


def mlp_rollout(p, x0, U, **kw):
    def step(x, u):
        xn = mlp_step(p, x, u, **kw)
        return xn, xn
    _, xs = lax.scan(step, x0, jnp.moveaxis(U, 1, 0))
    return jnp.moveaxis(xs, 0, 1)


def mlp_params(scale=0.3):
    return {"w1": R(S + A, HD, scale=scale), "b1": R(HD, scale=0.1), "w2": R(HD, S, scale=scale / 2),
            "b2": R(S, scale=0.1)}


PSPEC = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}
P6 = mlp_params()


def tpdyn(bug):
    def f(p, x0, U):
        red = (lambda y: y) if bug == "missing-psum" else (lambda y: psum(y, "tp"))
        return mlp_rollout(p, x0, U, tp_reduce=red, bias_first=(bug == "bias-before-psum"))
    return f


C.smap("s.learned_dyn_tp_mlp_rollout.dp2xtp4", {"dp": 2, "tp": 4}, tpdyn, (PSPEC, P("dp"), P("dp")), P("dp"),
       lambda p, x0, U: mlp_rollout(p, x0, U), (P6, R(8, S), R(8, H, A, scale=0.5)),
       bugs=[("missing-psum", ["missing-all-reduce"]), ("bias-before-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. training step of the dynamics model (check_vma=True), dp2 x tp4
OPT7 = optax.sgd(0.05, momentum=0.9)
S7 = OPT7.init(P6)
SS7 = state_specs(S7, PSPEC)


def dyn_loss(p, x0, U, Y, **kw):
    return jnp.mean((mlp_rollout(p, x0, U, **kw) - Y) ** 2)


def train_ref(p, s, x0, U, Y):
    l, g = jax.value_and_grad(dyn_loss)(p, x0, U, Y)
    u, s = OPT7.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def train(bug):
    def f(p, s, x0, U, Y):
        red = (lambda y: pmean(y, "tp")) if bug == "pmean-row-parallel" else (lambda y: psum(y, "tp"))

        def loss(p):
            l = dyn_loss(p, x0, U, Y, tp_reduce=red)
            return l if bug == "loss-not-pmeaned" else pmean(l, "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT7.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp") if bug == "loss-not-pmeaned" else l
    return f


C.smap("s.dyn_model_train_sgd_momentum.dp2xtp4", {"dp": 2, "tp": 4}, train,
       (PSPEC, SS7, P("dp"), P("dp"), P("dp")), (PSPEC, SS7, P()), train_ref,
       (P6, S7, R(8, S), R(8, 2, A), R(8, 2, S)), check_vma=True,
       bugs=[("loss-not-pmeaned", ["wrong-scale"]), ("pmean-row-parallel", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. discounted cost-to-go along a horizon sharded over sp4
H8, G8 = 16, 0.9


def ctg_ref(c):
    def step(acc, ct):
        acc = ct + G8 * acc
        return acc, acc
    _, out = lax.scan(step, jnp.zeros(c.shape[0]), c.T, reverse=True)
    return out.T


def ctg(bug):
    def f(c):
        n, L = 4, c.shape[1]
        me = idx("sp")
        t = jnp.arange(L)
        tri = jnp.where(t[None, :] >= t[:, None], G8 ** (t[None, :] - t[:, None]).astype(jnp.float32), 0.0)
        loc = c @ tri.T  # loc[:, i] = sum_{s>=i} g^(s-i) c[:, s]
        tot = lax.all_gather(loc[:, 0], "sp")  # (n, N)
        j = jnp.arange(n)
        if bug == "carry-from-left":
            sel, pw = j < me, (me - j - 1) * L
        else:
            sel, pw = j > me, (j - me - 1) * L
        nxt = jnp.sum(jnp.where(sel[:, None], G8 ** jnp.maximum(pw, 0).astype(jnp.float32)[:, None] * tot, 0.0), 0)
        dec = jnp.ones(L) if bug == "carry-undiscounted" else G8 ** (L - t).astype(jnp.float32)
        return loc + nxt[:, None] * dec[None, :]
    return f


C.smap("s.discounted_cost_to_go_horizon.sp4", {"sp": 4}, ctg, (P(None, "sp"),), P(None, "sp"), ctg_ref,
       (np.abs(R(6, H8)),),
       bugs=[("carry-from-left", ["wrong-order"]), ("carry-undiscounted", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. receding-horizon MPC in closed loop (dp4)
LR9 = 0.5


def rhc(bug):
    def f(x, U):
        tot = jnp.zeros(x.shape[0])
        for _ in range(3):
            g = jax.grad(lambda U: jnp.sum(rollout_cost(x, U)))(U)
            U = U - LR9 * g
            u = U[:, -1] if bug == "apply-last-action" else U[:, 0]
            tot = tot + stage(x, u)
            x = dyn(x, u)
            z = jnp.zeros_like(U[:, :1])
            U = jnp.concatenate([z, U[:, :-1]] if bug == "shift-wrong-way" else [U[:, 1:], z], 1)
        return x, U, tot, pmean(jnp.mean(tot), "dp")
    return f


def rhc_ref(x, U):
    tot = jnp.zeros(x.shape[0])
    for _ in range(3):
        g = jax.grad(lambda U: jnp.sum(rollout_cost(x, U)))(U)
        U = U - LR9 * g
        u = U[:, 0]
        tot = tot + stage(x, u)
        x = dyn(x, u)
        U = jnp.concatenate([U[:, 1:], jnp.zeros_like(U[:, :1])], 1)
    return x, U, tot, jnp.mean(tot)


C.smap("s.receding_horizon_warm_start.dp4", {"dp": 4}, rhc, (P("dp"), P("dp")), (P("dp"), P("dp"), P("dp"), P()),
       rhc_ref, (R(B1, S), R(B1, H, A, scale=0.3)),
       bugs=[("shift-wrong-way", ["wrong-permutation"]), ("apply-last-action", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 10. CEM written the other way: every device all_gathers the samples and
#     the costs, takes the global top_k indices and refits redundantly.


def cem_gather(bug):
    def f(x0, mu, sig, eps):
        for it in range(IT3):
            U = mu + sig * eps[it]
            c = rollout_cost(x0, U)
            Ug = lax.all_gather(U, "pop", axis=0, tiled=True)
            cg = lax.all_gather(c, "pop", axis=0, tiled=True)
            _, ix = lax.top_k(-(c if bug == "local-topk-indices" else cg), K3)
            el = jnp.take(Ug, ix, axis=0)
            mu = jnp.mean(el, 0)
            sig = (jnp.std(el, 0, ddof=1) if bug == "unbiased-std" else jnp.std(el, 0)) + 1e-3
        return mu, sig
    return f


C.smap("s.cem_allgather_samples_topk_take.pop8", {"pop": 8}, cem_gather, (P(), P(), P(), P(None, "pop")), (P(), P()),
       cem_ref, (R(S), R(H, A, scale=0.2), np.full((H, A), 0.7, np.float32), R(IT3, N3, H, A)),
       bugs=[("local-topk-indices", ["wrong-offset"]), ("unbiased-std", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 11. MPPI per initial state: states over dp2, each state's population of
#     16 over tp4; weights normalised over the state's whole population.
N11 = 16


def mppi_batch_ref(x0, U, eps):
    c = rollout_cost(x0[:, None], U[:, None] + eps)  # (B, N)
    w = jax.nn.softmax(-c / LAM4, axis=1)
    return U + jnp.einsum("bn,bnha->bha", w, eps)


def mppi_batch(bug):
    def f(x0, U, eps):
        c = rollout_cost(x0[:, None], U[:, None] + eps)
        ax = "dp" if bug == "pmax-over-dp" else "tp"
        m = lax.pmax(jnp.max(-c, 1, keepdims=True), ax)
        w = jnp.exp((-c - m) / LAM4)
        den = jnp.sum(w, 1, keepdims=True)
        if bug != "den-not-psummed":
            den = psum(den, "tp")
        return U + psum(jnp.einsum("bn,bnha->bha", w / den, eps), "tp")
    return f


C.smap("s.mppi_per_state_population_tp.dp2xtp4", {"dp": 2, "tp": 4}, mppi_batch, (P("dp"), P("dp"), P("dp", "tp")),
       P("dp"), mppi_batch_ref, (R(4, S), R(4, H, A, scale=0.2), R(4, N11, H, A, scale=0.7)),
       bugs=[("den-not-psummed", ["missing-all-reduce"]), ("pmax-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 12. trajectory optimisation through the tensor-parallel learned dynamics
#     inside shard_map (check_vma=True): states over dp2, hidden units over
#     tp4, the row-parallel output psum'd, the batch-mean cost pmean'd over
#     dp, 3 optax.sgd (momentum) steps on the actions by jax.grad.
OPT12 = optax.sgd(0.3, momentum=0.5)


def plan_cost(p, x0, U, goal, **kw):
    xs = mlp_rollout(p, x0, U, **kw)
    return jnp.mean(jnp.sum((xs - goal) ** 2, -1), -1) + RW * jnp.sum(U ** 2, (-1, -2))


def tp_plan_ref(p, x0, U, goal):
    s = OPT12.init(U)
    for _ in range(3):
        g = jax.grad(lambda U: jnp.mean(plan_cost(p, x0, U, goal)))(U)
        u, s = OPT12.update(g, s)
        U = optax.apply_updates(U, u)
    return U, jnp.mean(plan_cost(p, x0, U, goal))


def tp_plan(bug):
    def f(p, x0, U, goal):
        kw = dict(tp_reduce=lambda y: psum(y, "tp"), bias_first=(bug == "bias-before-psum"))

        def loss(U):
            m = jnp.mean(plan_cost(p, x0, U, goal, **kw))
            return m if bug == "cost-not-pmeaned" else pmean(m, "dp")
        s = OPT12.init(U)
        for _ in range(3):
            g = jax.grad(loss)(U)
            u, s = OPT12.update(g, s)
            U = optax.apply_updates(U, u)
        return U, pmean(jnp.mean(plan_cost(p, x0, U, goal, **kw)), "dp")
    return f


C.smap("s.plan_through_tp_dynamics_sgd.dp2xtp4", {"dp": 2, "tp": 4}, tp_plan, (PSPEC, P("dp"), P("dp"), P()),
       (P("dp"), P()), tp_plan_ref, (mlp_params(), R(8, S), R(8, H, A, scale=0.3), R(S)), check_vma=True,
       bugs=[("bias-before-psum", ["wrong-scale"]), ("cost-not-pmeaned", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. the discounted cost-to-go of 8. with the carry passed from right to
#     left by a chain of ppermutes (block reverse scans), horizon over sp4.


def ctg_chain(bug):
    def f(c):
        n, L = 4, c.shape[1]

        def step(acc, ct):
            acc = ct + G8 * acc
            return acc, acc
        _, loc = lax.scan(step, jnp.zeros(c.shape[0]), c.T, reverse=True)
        loc = loc.T
        head = loc[:, 0]
        shift = [(i, i + 1) for i in range(n - 1)] if bug == "chain-wrong-way" else [(i + 1, i) for i in range(n - 1)]
        carry = jnp.zeros_like(head)  # the cost-to-go at the start of the next block
        for _ in range(n - 1):
            carry = lax.ppermute(head + (G8 ** (L - 1 if bug == "carry-exponent-off-by-one" else L)) * carry,
                                 "sp", shift)
        t = jnp.arange(L)
        return loc + carry[:, None] * (G8 ** (L - t).astype(jnp.float32))[None, :]
    return f


C.smap("s.cost_to_go_ppermute_chain.sp4", {"sp": 4}, ctg_chain, (P(None, "sp"),), P(None, "sp"), ctg_ref,
       (np.abs(R(6, H8)),),
       bugs=[("chain-wrong-way", ["wrong-permutation"]), ("carry-exponent-off-by-one", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 14. the learned dynamics in bf16 (f32 accumulation, preferred_element_type)
#     rolled out over 4 steps, hidden units over tp4, batch over dp2; the
#     row-parallel reduction written as psum_scatter over the state dim
#     followed by a tiled all_gather.
BF = jnp.bfloat16


def bf_step(p, x, u, reduce=lambda y: y):
    xu = jnp.concatenate([x, u], -1).astype(BF)
    h = jax.nn.gelu(jnp.dot(xu, p["w1"], preferred_element_type=jnp.float32) + p["b1"]).astype(BF)
    y = reduce(jnp.dot(h, p["w2"], preferred_element_type=jnp.float32))
    return x + y + p["b2"]


def bf_roll(p, x0, U, **kw):
    xs = []
    x = x0
    for t in range(U.shape[1]):
        x = bf_step(p, x, U[:, t], **kw)
        xs.append(x)
    return jnp.stack(xs, 1)


def bf_dyn(bug):
    def red(y):
        if bug == "gather-without-reduce":
            return lax.all_gather(lax.dynamic_slice_in_dim(y, idx("tp"), 1, 1), "tp", axis=1, tiled=True)
        z = lax.psum_scatter(y, "tp", scatter_dimension=1, tiled=True)  # (b, S / tp)
        if bug == "gather-on-batch-axis":
            return lax.all_gather(z, "tp", axis=0, tiled=True).reshape(y.shape)
        return lax.all_gather(z, "tp", axis=1, tiled=True)

    def f(p, x0, U):
        return bf_roll(p, x0, U, reduce=red)
    return f


PBF = {"w1": R(S + A, HD, scale=0.3).astype(BF), "b1": R(HD, scale=0.1), "w2": R(HD, S, scale=0.15).astype(BF),
       "b2": R(S, scale=0.1)}
C.smap("s.bf16_dyn_psum_scatter_allgather.dp2xtp4", {"dp": 2, "tp": 4}, bf_dyn, (PSPEC, P("dp"), P("dp")), P("dp"),
       lambda p, x0, U: bf_roll(p, x0, U), (PBF, R(8, S), R(8, 4, A, scale=0.5)),
       bugs=[("gather-without-reduce", ["missing-all-reduce"]), ("gather-on-batch-axis", ["wrong-reshape-order"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (correct only)
# 15. CEM with the population over pop8
C.gspmd("g.cem_population_sharded.pop8", {"pop": 8}, (P(), P(), P(), P(None, "pop")), (P(), P()), cem_ref,
        (R(S), R(H, A, scale=0.2), np.full((H, A), 0.6, np.float32), R(IT3, N3, H, A)))


# 16. two MPPI iterations with the population over dp2 x tp4
def mppi2(x0, U, eps):
    for it in range(2):
        U = mppi_ref(x0, U, eps[it])
    return U


C.gspmd("g.mppi_two_iters_population.dp2xtp4", {"dp": 2, "tp": 4}, (P(), P(), P(None, ("dp", "tp"))), P(), mppi2,
        (R(S), R(H, A, scale=0.2), R(2, N4, H, A, scale=0.7)))

# 17. trajectory optimisation with optax.adam through the learned MLP dynamics
OPT16 = optax.adam(0.05)


def adam_plan(p, x0, U, goal):
    def cost(U):
        xs = mlp_rollout(p, x0, U)
        return jnp.mean(jnp.sum((xs - goal) ** 2, -1)) + RW * jnp.mean(U ** 2)
    s = OPT16.init(U)
    for _ in range(4):
        g = jax.grad(cost)(U)
        u, s = OPT16.update(g, s)
        U = optax.apply_updates(U, u)
    return U, cost(U)


C.gspmd("g.adam_plan_through_tp_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (PSPEC, P("dp"), P("dp"), P()), (P("dp"), P()),
        adam_plan, (mlp_params(), R(8, S), R(8, H, A, scale=0.3), R(S)))

# 18. the Riccati backward pass of 5. with the batch over dp4
C.gspmd("g.ilqr_backward_pass_batch.dp4", {"dp": 4}, (P("dp"), P("dp"), P("dp"), P(), P(), P()),
        (P("dp"), P("dp"), P()), ilqr_ref,
        ((np.eye(S) + 0.1 * R(B5, H5, S, S)).astype(np.float32), R(B5, H5, S, A, scale=0.3), R(B5, S), Q5, R5, QF5))

# 19. an optax.adamw training step of the dynamics model (dp2 x tp4)
OPT14 = optax.adamw(1e-2, weight_decay=1e-3)
P14 = mlp_params()
S14 = OPT14.init(P14)
SS14 = state_specs(S14, PSPEC)


def train14(p, s, x0, U, Y):
    l, g = jax.value_and_grad(dyn_loss)(p, x0, U, Y)
    u, s = OPT14.update(g, s, p)
    return optax.apply_updates(p, u), s, l


C.gspmd("g.dyn_model_adamw_step.dp2xtp4", {"dp": 2, "tp": 4}, (PSPEC, SS14, P("dp"), P("dp"), P("dp")),
        (PSPEC, SS14, P()), train14, (P14, S14, R(8, S), R(8, 3, A), R(8, 3, S)))

C.finish()
