"""samples/fresh35: a 35th batch of programs as a user writes them, on the
theme of scientific machine learning with higher-order automatic
differentiation under sharding (physics-informed networks, Hessian-vector
products, neural ODEs, Hamiltonian networks, Fourier features, Sobolev
training, continuous normalizing flows) in JAX / optax, none of them an
idiom of samples/fresh .. fresh33, probe, train or wild.
shard_map families:
 1. PINN loss of the 2-D Poisson equation: interior collocation points over
    dp, boundary points replicated, a tanh net's hidden units over tp; each
    rank's Laplacian is the trace of jax.hessian of its partial output
    w.r.t. the input, psum'd over tp. Bugs: Laplacian not psum'd over tp
    (the derivative of the local shard's output), residual mean over the
    local points only, the anti-diagonal summed (trace of fliplr(H)).
 2. forward-over-reverse Hessian-vector product (jax.jvp of jax.grad) of a
    loss of a parameter vector over dp (softplus penalty + |tanh(A theta)|^2,
    A's columns sharded like theta, A theta psum'd), the tangent passed
    replicated and sliced at the rank's offset; check_vma=True. Bugs:
    tangent block at offset 0 (pcast to varying), tangent blocks reversed.
 3. neural ODE, RK4 in a lax.scan returning the trajectory, state batch over
    dp, the field's hidden units over tp (psum, bias after it). Bugs: RK4
    weights wrong (divided by 5) on the last dp shard, field not psum'd,
    bias added inside the psum.
 4. training a neural ODE (RK4 unrolled, 4 steps), two optax.sgd(momentum)
    steps, parameters replicated, batch over dp8, local loss over the
    global count and gradients psum'd. Bugs: gradients pmean'd, gradients
    not reduced.
 5. Hamiltonian network: dq/dt = dH/dp, dp/dt = -dH/dq from jax.jacrev of
    each tp rank's partial energy, psum'd; states over dp; loss against
    observed derivatives. Bugs: energy gradient not psum'd, loss psum'd
    over (dp, tp).
 6. Fourier-feature embedding [sin 2 pi B x, cos 2 pi B x] with the
    frequencies over tp (B and the first layer replicated, sliced at the
    rank's offset in the sine half and in the cosine half), pre-activations
    psum'd, u and grad u by jax.jacfwd; points over dp. Bugs: cosine rows
    taken from the sine half, frequencies at offset 0.
 7. Sobolev training of a 1-D regressor (values and jax.grad slopes), two
    optax.adam steps, parameters replicated, points over dp8, gradients
    psum'd. Bugs: derivative term over the local count, gradients not
    reduced.
 8. a full PINN training step for the heat equation u_t = nu u_xx: a
    two-hidden-layer net (column- then row-parallel with a psum over tp),
    u_t by jax.grad and u_xx by jax.hessian through the psum, interior
    points over dp, initial/boundary points replicated, jax.value_and_grad
    and optax.adam applied shard-wise, two steps; check_vma=True. Bugs:
    boundary loss counted on every device (inside the psum over dp),
    residual psum'd over (dp, tp) (pcast to varying over tp first: JAX 0.12
    rejects a psum over an axis the value does not vary over), residual
    over the local count.
 9. the Laplacian on R^8 as the sum of e_i . (H e_i) by jax.jvp of jax.grad,
    the 8 input dims split over tp (2 per rank at the rank's offset, basis
    by jax.nn.one_hot) and psum'd; points over dp. Bugs: basis without the
    rank offset, the off-diagonal entry (i + 1) taken.
10. a neural ODE with a wide state: features over tp and batch over dp, the
    field column-parallel, each RK4 stage all_gathers its input (3 steps
    unrolled). Bugs: RK4 weights swapped (2,1,1,2)/6 on tp rank 3, stage 4
    from the stale stage-3 gather.
11. incompressibility penalty of a velocity field R^4 -> R^4, the output
    layer's columns over tp (one component per rank), d v_r / d x_r from
    jax.jacrev at the rank's index, divergence psum'd over tp; points over
    dp. Bugs: component index 0, divergence not psum'd.
12. a continuous normalizing flow with the exact trace (jax.jacfwd per
    sample), Euler steps in a lax.fori_loop, samples over dp8, the mean
    NLL pmean'd. Bugs: local mean, psum of local means.
13. the viscous Burgers residual u_t + u u_x - nu u_xx of a net whose second
    layer is row-parallel with psum_scatter (bias replicated, sliced at the
    rank's offset) and whose output is psum'd; derivatives of the partial
    output by jax.jacfwd (twice for u_xx), u, u_t, u_x, u_xx stacked and
    psum'd together before the nonlinear term. Bugs: bias slice at offset 0,
    nonlinear term formed from the partials (psum of u_p * ux_p).
14. a leapfrog rollout (lax.scan, 5 steps) of a learned potential (hidden
    units over tp, dV/dq psum'd), states over dp, mean energy drift. Bugs:
    second kick's gradient not psum'd, drift mean over the local batch.
GSPMD pairs (jax.jit with in/out shardings): 15. the Poisson PINN loss of
1.; 16. the jvp-of-grad HVP of 2. on dp8 with the tangent over dp; 17. the
RK4 scan of 3.; 18. the heat-equation PINN training step of 8. (two adam
steps, parameters and moments under the tp shardings); 19. the Hamiltonian
network's loss and its gradient (jax.value_and_grad) of 5.
Numerics: every correct pair agrees with its baseline at rounding level
(f32, at most a few 1e-6); every bug variant differs clearly (see
"numerics"; the smallest are 10.'s RK4 weights on one shard, ~1e-3, and
14.'s local drift, ~7e-4, both far above rounding). First-draft changes:
3.'s and 10.'s weight bugs used the 3/8-rule weights, which differ from
RK4's by only ~1e-4; replaced by a wrong normaliser and swapped weights.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh35.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh35.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh35.py"
C = Corpus("samples/fresh35", SCRIPT, "samples/gen/run_fresh35.sh", sys.argv[1:])
rng, R, I = seeded(3535)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
PI = np.float32(np.pi)


def U(lo, hi, *s):
    """Collocation points: uniform in [lo, hi)."""
    return rng.uniform(lo, hi, s).astype(np.float32)


def poisson_src(x):
    """f of -lap u = f with u* = sin(pi x) sin(pi y)."""
    return 2.0 * PI ** 2 * jnp.sin(PI * x[..., 0]) * jnp.sin(PI * x[..., 1])


# ---------------------------------------------------------------------------
# 1. PINN loss of the 2-D Poisson equation: -lap u = f on interior points
#    (over dp), u = g on boundary points (replicated); a one-hidden-layer
#    tanh net with its hidden units over tp. Each tp rank takes the Hessian
#    of its partial output with respect to the input, its trace, and the
#    Laplacians are psum'd over tp (the Laplacian is linear in the output).

def pinn_poisson(W1, b1, w2, b2, X, Xb, gb):
    u = lambda x: jnp.tanh(x @ W1 + b1) @ w2 + b2
    lap = jax.vmap(lambda x: jnp.trace(jax.hessian(u)(x)))(X)
    r = -lap - poisson_src(X)
    ub = jax.vmap(u)(Xb)
    return jnp.mean(r ** 2) + jnp.mean((ub - gb) ** 2), lap


def pinn_poisson_sm(bug):
    def f(W1, b1, w2, b2, X, Xb, gb):
        part = lambda x: jnp.tanh(x @ W1 + b1) @ w2

        def lap_of(x):
            H = jax.hessian(part)(x)
            if bug == "laplacian-antidiagonal":
                return jnp.trace(jnp.fliplr(H))
            return jnp.trace(H)
        lap = jax.vmap(lap_of)(X)
        if bug != "laplacian-not-psummed-over-tp":
            lap = psum(lap, "tp")
        r = -lap - poisson_src(X)
        if bug == "residual-mean-local-points":
            res = jnp.mean(r ** 2)
        else:
            res = psum(jnp.sum(r ** 2), "dp") / (X.shape[0] * 2)
        ub = psum(jax.vmap(part)(Xb), "tp") + b2
        return res + jnp.mean((ub - gb) ** 2), lap
    return f


XB1 = np.concatenate([np.stack([U(0, 1, 4), np.zeros(4, np.float32)], 1),
                      np.stack([np.ones(4, np.float32), U(0, 1, 4)], 1)])
C.smap("s.pinn_poisson_hessian_trace.dp2xtp4", {"dp": 2, "tp": 4}, pinn_poisson_sm,
       (P(None, "tp"), P("tp"), P("tp"), P(), P("dp"), P(), P()), (P(), P("dp")), pinn_poisson,
       (R(2, 16), R(16, scale=0.5), R(16, scale=0.5), np.float32(0.1), U(0, 1, 32, 2), XB1, R(8, scale=0.1)),
       bugs=[("laplacian-not-psummed-over-tp", ["missing-all-reduce"]),
             ("residual-mean-local-points", ["missing-all-reduce"]),
             ("laplacian-antidiagonal", ["wrong-operand"])])


# ---------------------------------------------------------------------------
# 2. forward-over-reverse Hessian-vector product (jax.jvp of jax.grad) of a
#    loss of a parameter vector sharded over dp: a softplus penalty plus
#    0.5 |tanh(A theta)|^2 with A's columns sharded like theta (A theta
#    psum'd). The tangent comes replicated (from the host) and each rank
#    slices its block at the rank's offset. check_vma=True.

def hvp_loss(theta, A, c):
    return jnp.sum(c * jax.nn.softplus(theta)) + 0.5 * jnp.sum(jnp.tanh(A @ theta) ** 2)


def hvp_ref(theta, A, c, v):
    return jax.jvp(jax.grad(lambda t: hvp_loss(t, A, c)), (theta,), (v,))


def hvp_sm(bug):
    def f(theta, A, c, v):
        nl, n = theta.shape[0], 4
        me = idx("dp")
        if bug == "tangent-block-at-offset-0":
            vl = lax.pcast(v[:nl], ("dp",), to="varying")
        elif bug == "tangent-block-reversed":
            vl = lax.dynamic_slice_in_dim(v, (n - 1 - me) * nl, nl)
        else:
            vl = lax.dynamic_slice_in_dim(v, me * nl, nl)

        def L(t):
            s = psum(A @ t, "dp")
            return psum(jnp.sum(c * jax.nn.softplus(t)), "dp") + 0.5 * jnp.sum(jnp.tanh(s) ** 2)
        return jax.jvp(jax.grad(L), (theta,), (vl,))
    return f


C.smap("s.hvp_fwd_over_rev_sharded_theta.dp4", {"dp": 4}, hvp_sm, (P("dp"), P(None, "dp"), P("dp"), P()),
       (P("dp"), P("dp")), hvp_ref, (R(32, scale=0.5), R(6, 32, scale=0.3), np.abs(R(32)) + 0.5, R(32)),
       bugs=[("tangent-block-at-offset-0", ["wrong-offset"]), ("tangent-block-reversed", ["wrong-offset"])],
       check_vma=True)


# ---------------------------------------------------------------------------
# 3. neural ODE: classical RK4 in a lax.scan, the state batch over dp, the
#    vector field's hidden units over tp (column- then row-parallel, output
#    psum'd, bias after the psum); returns the trajectory.

DT3, NS3 = 0.1, 6


def rk4_step(f, z, dt, w=(1.0, 2.0, 2.0, 1.0)):
    k1 = f(z)
    k2 = f(z + 0.5 * dt * k1)
    k3 = f(z + 0.5 * dt * k2)
    k4 = f(z + dt * k3)
    return z + dt * (w[0] * k1 + w[1] * k2 + w[2] * k3 + w[3] * k4) / sum(w)


def node_traj(W1, b1, W2, b2, z0):
    f = lambda z: jnp.tanh(z @ W1 + b1) @ W2 + b2

    def step(z, _):
        z = rk4_step(f, z, DT3)
        return z, z
    return lax.scan(step, z0, None, length=NS3)[1]


def node_traj_sm(bug):
    def fsm(W1, b1, W2, b2, z0):
        def f(z):
            y = jnp.tanh(z @ W1 + b1) @ W2
            if bug == "bias-inside-psum":
                return psum(y + b2, "tp")
            if bug == "field-not-psummed":
                return y + b2
            return psum(y, "tp") + b2
        me = idx("dp")

        def step(z, _):
            k1 = f(z)
            k2 = f(z + 0.5 * DT3 * k1)
            k3 = f(z + 0.5 * DT3 * k2)
            k4 = f(z + DT3 * k3)
            if bug == "stage-weights-wrong-on-last-shard":
                w = jnp.where(me == 3, jnp.array([1.0, 2.0, 2.0, 1.0]) / 5, jnp.array([1.0, 2.0, 2.0, 1.0]) / 6)
            else:
                w = jnp.array([1.0, 2.0, 2.0, 1.0]) / 6
            z = z + DT3 * (w[0] * k1 + w[1] * k2 + w[2] * k3 + w[3] * k4)
            return z, z
        return lax.scan(step, z0, None, length=NS3)[1]
    return fsm


C.smap("s.node_rk4_scan_hidden_tp.dp4xtp2", {"dp": 4, "tp": 2}, node_traj_sm,
       (P(None, "tp"), P("tp"), P("tp", None), P(), P("dp")), P(None, "dp"), node_traj,
       (R(4, 16, scale=0.5), R(16, scale=0.3), R(16, 4, scale=0.4), R(4, scale=0.2), R(8, 4)),
       bugs=[("stage-weights-wrong-on-last-shard", ["wrong-scale"]), ("field-not-psummed", ["missing-all-reduce"]),
             ("bias-inside-psum", ["wrong-scale"])])


# ---------------------------------------------------------------------------
# 4. training a neural ODE (RK4 unrolled, 4 steps) to map z0 to zT: two
#    optax.sgd(momentum) steps, parameters replicated, batch over dp8; the
#    loss of each device is its squared error over the GLOBAL count, so the
#    gradients are psum'd.

SGD4 = optax.sgd(0.05, momentum=0.9)


def node_flow(p, z):
    f = lambda z: jnp.tanh(z @ p["W1"] + p["b1"]) @ p["W2"]
    for _ in range(4):
        z = rk4_step(f, z, 0.25)
    return z


def node_train(p, z0, zT):
    st = SGD4.init(p)
    losses = []
    for _ in range(2):
        l, g = jax.value_and_grad(lambda q: jnp.mean(jnp.sum((node_flow(q, z0) - zT) ** 2, -1)))(p)
        u, st = SGD4.update(g, st, p)
        p = optax.apply_updates(p, u)
        losses.append(l)
    return p, jnp.stack(losses)


def node_train_sm(bug):
    def f(p, z0, zT):
        n_glob = z0.shape[0] * 8
        st = SGD4.init(p)
        losses = []
        for _ in range(2):
            l, g = jax.value_and_grad(lambda q: jnp.sum((node_flow(q, z0) - zT) ** 2) / n_glob)(p)
            if bug == "grads-pmean-of-global-normalised":
                g = jax.tree.map(lambda x: pmean(x, "dp"), g)
            elif bug != "grads-not-reduced":
                g = jax.tree.map(lambda x: psum(x, "dp"), g)
            u, st = SGD4.update(g, st, p)
            p = optax.apply_updates(p, u)
            losses.append(psum(l, "dp"))
        return p, jnp.stack(losses)
    return f


P4 = {"W1": R(3, 12, scale=0.5), "b1": R(12, scale=0.2), "W2": R(12, 3, scale=0.5)}
C.smap("s.node_train_rk4_unrolled_sgd.dp8", {"dp": 8}, node_train_sm, ({"W1": P(), "b1": P(), "W2": P()}, P("dp"), P("dp")),
       ({"W1": P(), "b1": P(), "W2": P()}, P()), node_train, (P4, R(16, 3), R(16, 3)),
       bugs=[("grads-pmean-of-global-normalised", ["wrong-scale"]), ("grads-not-reduced", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 5. Hamiltonian neural network: a learned energy H(q, p) (hidden units over
#    tp), dq/dt = dH/dp, dp/dt = -dH/dq from jax.grad of each rank's partial
#    energy psum'd over tp; the states over dp; loss against observed time
#    derivatives.

def hnn(W1, b1, w2, Z, dZ):
    E = lambda z: jnp.tanh(z @ W1 + b1) @ w2
    gH = jax.vmap(jax.grad(E))(Z)
    pred = jnp.concatenate([gH[:, 2:], -gH[:, :2]], 1)
    return pred, jnp.mean(jnp.sum((pred - dZ) ** 2, 1))


def hnn_sm(bug):
    def f(W1, b1, w2, Z, dZ):
        E = lambda z: jnp.tanh(z @ W1 + b1) @ w2
        gH = jax.vmap(jax.jacrev(E))(Z)
        if bug != "energy-grad-not-psummed":
            gH = psum(gH, "tp")
        pred = jnp.concatenate([gH[:, 2:], -gH[:, :2]], 1)
        se = jnp.sum((pred - dZ) ** 2)
        axes = ("dp", "tp") if bug == "loss-psum-over-dp-and-tp" else "dp"
        return pred, psum(se, axes) / (Z.shape[0] * 2)
    return f


C.smap("s.hamiltonian_nn_energy_grad.dp2xtp4", {"dp": 2, "tp": 4}, hnn_sm,
       (P(None, "tp"), P("tp"), P("tp"), P("dp"), P("dp")), (P("dp"), P()), hnn,
       (R(4, 16, scale=0.5), R(16, scale=0.3), R(16, scale=0.5), R(16, 4), R(16, 4)),
       bugs=[("energy-grad-not-psummed", ["missing-all-reduce"]), ("loss-psum-over-dp-and-tp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 6. Fourier-feature embedding [sin(2 pi B x), cos(2 pi B x)] with the
#    frequencies over tp: B and the first layer come replicated; each rank
#    takes its 4 frequencies and the first layer's rows for its sines (first
#    half) and its cosines (second half); pre-activations psum'd over tp;
#    u and its input gradient by jax.jacfwd; points over dp.

NF6 = 8


def ff_net(B, W1, b1, w2, X):
    def u(x):
        z = 2 * PI * (B @ x)
        return jnp.tanh(jnp.concatenate([jnp.sin(z), jnp.cos(z)]) @ W1 + b1) @ w2
    return jax.vmap(u)(X), jax.vmap(jax.jacfwd(u))(X)


def ff_net_sm(bug):
    def f(B, W1, b1, w2, X):
        me, ml = idx("tp"), NF6 // 2
        Bl = lax.dynamic_slice_in_dim(B, 0 if bug == "frequencies-at-offset-0" else me * ml, ml)
        Ws = lax.dynamic_slice_in_dim(W1, me * ml, ml)
        Wc = lax.dynamic_slice_in_dim(W1, (0 if bug == "cos-rows-from-sin-half" else NF6) + me * ml, ml)

        def u(x):
            z = 2 * PI * (Bl @ x)
            return jnp.tanh(psum(jnp.sin(z) @ Ws + jnp.cos(z) @ Wc, "tp") + b1) @ w2
        return jax.vmap(u)(X), jax.vmap(jax.jacfwd(u))(X)
    return f


C.smap("s.fourier_features_freq_tp_jacfwd.dp4xtp2", {"dp": 4, "tp": 2}, ff_net_sm, (P(), P(), P(), P(), P("dp")),
       (P("dp"), P("dp")), ff_net, (R(NF6, 2, scale=0.7), R(2 * NF6, 16, scale=0.4), R(16, scale=0.2),
                                    R(16, scale=0.4), U(0, 1, 16, 2)),
       bugs=[("cos-rows-from-sin-half", ["wrong-offset"]), ("frequencies-at-offset-0", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 7. Sobolev training of a 1-D regressor: values and derivatives (du/dx by
#    jax.grad per point) matched, two optax.adam steps, parameters
#    replicated, points over dp8, the per-device loss over the global
#    count, gradients psum'd.

ADAM7 = optax.adam(1e-2)
LAM7 = 0.3


def sob_u(p, x):
    h = jnp.tanh(x * p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["W2"] + p["b2"])
    return h @ p["w3"]


def sob_terms(p, x, y, dy):
    u = jax.vmap(lambda t: sob_u(p, t))(x)
    du = jax.vmap(jax.grad(lambda t: sob_u(p, t)))(x)
    return jnp.sum((u - y) ** 2), jnp.sum((du - dy) ** 2)


def sobolev_train(p, x, y, dy):
    st, losses = ADAM7.init(p), []
    for _ in range(2):
        def loss(q):
            a, b = sob_terms(q, x, y, dy)
            return (a + LAM7 * b) / x.shape[0]
        l, g = jax.value_and_grad(loss)(p)
        u, st = ADAM7.update(g, st, p)
        p = optax.apply_updates(p, u)
        losses.append(l)
    return p, jnp.stack(losses)


def sobolev_sm(bug):
    def f(p, x, y, dy):
        n = x.shape[0] * 8
        st, losses = ADAM7.init(p), []
        for _ in range(2):
            def loss(q):
                a, b = sob_terms(q, x, y, dy)
                nb = x.shape[0] if bug == "derivative-term-over-local-count" else n
                return a / n + LAM7 * b / nb
            l, g = jax.value_and_grad(loss)(p)
            if bug != "grads-not-reduced":
                g = psum(g, "dp")
            u, st = ADAM7.update(g, st, p)
            p = optax.apply_updates(p, u)
            losses.append(psum(l, "dp"))
        return p, jnp.stack(losses)
    return f


X7 = U(-1, 1, 32)
P7 = {"w1": R(16, scale=1.0), "b1": R(16, scale=0.3), "W2": R(16, 16, scale=0.3), "b2": R(16, scale=0.1),
      "w3": R(16, scale=0.3)}
PS7 = {k: P() for k in P7}
C.smap("s.sobolev_values_and_slopes_adam.dp8", {"dp": 8}, sobolev_sm, (PS7, P("dp"), P("dp"), P("dp")), (PS7, P()),
       sobolev_train, (P7, X7, np.sin(3 * X7), 3 * np.cos(3 * X7)),
       bugs=[("derivative-term-over-local-count", ["wrong-scale"]), ("grads-not-reduced", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 8. a full PINN training step for the heat equation u_t = nu u_xx on
#    (t, x) in [0, 1]^2: a two-hidden-layer tanh net under tensor
#    parallelism (first layer column-parallel, second row-parallel with a
#    psum), u_t by jax.grad and u_xx by jax.hessian of the net w.r.t. its
#    input (through the psum), interior points over dp, initial/boundary
#    points replicated; jax.grad of the loss, optax.adam applied shard-wise,
#    two steps. check_vma=True.

NU8 = 0.1
ADAM8 = optax.adam(5e-3)


def heat_net(p, x, red=lambda y: y):
    h = jnp.tanh(x @ p["W1"] + p["b1"])
    h = jnp.tanh(red(h @ p["W2"]) + p["b2"])
    return h @ p["w3"] + p["b3"]


def heat_loss_parts(p, Xi, Xb, gb, red):
    u = lambda x: heat_net(p, x, red)
    ut = jax.vmap(lambda x: jax.grad(u)(x)[0])(Xi)
    uxx = jax.vmap(lambda x: jax.hessian(u)(x)[1, 1])(Xi)
    r = ut - NU8 * uxx
    ub = jax.vmap(u)(Xb)
    return jnp.sum(r ** 2), jnp.mean((ub - gb) ** 2)


def heat_train(p, st, Xi, Xb, gb):
    losses = []
    for _ in range(2):
        def loss(q):
            a, b = heat_loss_parts(q, Xi, Xb, gb, lambda y: y)
            return a / Xi.shape[0] + b
        l, g = jax.value_and_grad(loss)(p)
        u, st = ADAM8.update(g, st, p)
        p = optax.apply_updates(p, u)
        losses.append(l)
    return p, st, jnp.stack(losses)


def heat_train_sm(bug):
    def f(p, st, Xi, Xb, gb):
        n = Xi.shape[0] * 2
        losses = []
        for _ in range(2):
            def loss(q):
                a, b = heat_loss_parts(q, Xi, Xb, gb, lambda y: psum(y, "tp"))
                if bug == "boundary-counted-on-every-device":
                    return psum(a / n + b, "dp")
                if bug == "residual-psum-over-dp-and-tp":
                    return psum(lax.pcast(a, ("tp",), to="varying"), ("dp", "tp")) / n + b
                if bug == "residual-over-local-count":
                    return psum(a, "dp") / Xi.shape[0] + b
                return psum(a, "dp") / n + b
            l, g = jax.value_and_grad(loss)(p)
            u, st = ADAM8.update(g, st, p)
            p = optax.apply_updates(p, u)
            losses.append(l)
        return p, st, jnp.stack(losses)
    return f


def heat_bc():
    t0 = np.stack([np.zeros(6, np.float32), U(0, 1, 6)], 1)  # u(0, x) = sin(pi x)
    x0 = np.stack([U(0, 1, 3), np.zeros(3, np.float32)], 1)
    x1 = np.stack([U(0, 1, 3), np.ones(3, np.float32)], 1)
    Xb = np.concatenate([t0, x0, x1])
    gb = np.concatenate([np.sin(np.pi * t0[:, 1]), np.zeros(6)]).astype(np.float32)
    return Xb, gb


P8 = {"W1": R(2, 16, scale=0.8), "b1": R(16, scale=0.2), "W2": R(16, 16, scale=0.3), "b2": R(16, scale=0.1),
      "w3": R(16, scale=0.4), "b3": np.float32(0.0)}
SPEC8 = {"W1": P(None, "tp"), "b1": P("tp"), "W2": P("tp", None), "b2": P(), "w3": P(), "b3": P()}
S8 = ADAM8.init(P8)
SS8 = state_specs(S8, SPEC8)
XB8, GB8 = heat_bc()
XI8 = U(0, 1, 32, 2)
C.smap("s.pinn_heat_train_step_adam_tp.dp2xtp4", {"dp": 2, "tp": 4}, heat_train_sm,
       (SPEC8, SS8, P("dp"), P(), P()), (SPEC8, SS8, P()), heat_train, (P8, S8, XI8, XB8, GB8),
       bugs=[("boundary-counted-on-every-device", ["wrong-scale"]),
             ("residual-psum-over-dp-and-tp", ["wrong-collective-group"]),
             ("residual-over-local-count", ["wrong-scale"])],
       check_vma=True)


# ---------------------------------------------------------------------------
# 9. the Laplacian of a net on R^8 as the sum of Hessian diagonal entries
#    e_i . (H e_i) by forward-over-reverse (jax.jvp of jax.grad), the 8
#    input dimensions split over tp (2 per rank at the rank's offset) and
#    psum'd; points over dp; the Poisson residual's mean square.

D9 = 8


def lap8(W1, b1, w2, X, F):
    u = lambda x: jnp.tanh(x @ W1 + b1) @ w2

    def lap(x):
        return sum(jax.jvp(jax.grad(u), (x,), (jnp.eye(D9)[i],))[1][i] for i in range(D9))
    L = jax.vmap(lap)(X)
    return L, jnp.mean((L + F) ** 2)


def lap8_sm(bug):
    def f(W1, b1, w2, X, F):
        u = lambda x: jnp.tanh(x @ W1 + b1) @ w2
        me, k = idx("tp"), D9 // 4

        def lap_part(x):
            s = 0.0
            for j in range(k):
                i = j if bug == "basis-without-offset" else me * k + j
                hv = jax.jvp(jax.grad(u), (x,), (jax.nn.one_hot(i, D9, dtype=x.dtype),))[1]
                s = s + hv[(i + 1) % D9 if bug == "off-diagonal-entry" else i]
            return s
        L = psum(jax.vmap(lap_part)(X), "tp")
        return L, psum(jnp.sum((L + F) ** 2), "dp") / (X.shape[0] * 2)
    return f


C.smap("s.laplacian_hessian_diag_split_tp.dp2xtp4", {"dp": 2, "tp": 4}, lap8_sm, (P(), P(), P(), P("dp"), P("dp")),
       (P("dp"), P()), lap8, (R(D9, 16, scale=0.5), R(16, scale=0.3), R(16, scale=0.5), R(16, D9, scale=0.5), R(16)),
       bugs=[("basis-without-offset", ["wrong-offset"]), ("off-diagonal-entry", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 10. a neural ODE with a wide state: the state's features over tp and the
#     batch over dp, the field tanh(z W + b) column-parallel (W's columns
#     over tp), so each RK4 stage all_gathers its stage input along the
#     features; three steps unrolled.

DT10 = 0.2


def wide_node(W, b, z):
    f = lambda z: jnp.tanh(z @ W + b)
    for _ in range(3):
        z = rk4_step(f, z, DT10)
    return z


def wide_node_sm(bug):
    def fsm(W, b, z):
        me = idx("tp")
        gat = lambda y: lax.all_gather(y, "tp", axis=1, tiled=True)
        f = lambda yg: jnp.tanh(yg @ W + b)
        for _ in range(3):
            g1 = gat(z)
            k1 = f(g1)
            g2 = gat(z + 0.5 * DT10 * k1)
            k2 = f(g2)
            g3 = gat(z + 0.5 * DT10 * k2)
            k3 = f(g3)
            k4 = f(g3) if bug == "stage4-from-stale-gather" else f(gat(z + DT10 * k3))
            if bug == "stage-weights-wrong-on-shard-3":
                w = jnp.where(me == 3, jnp.array([2.0, 1.0, 1.0, 2.0]) / 6, jnp.array([1.0, 2.0, 2.0, 1.0]) / 6)
                z = z + DT10 * (w[0] * k1 + w[1] * k2 + w[2] * k3 + w[3] * k4)
            else:
                z = z + DT10 * (k1 + 2 * k2 + 2 * k3 + k4) / 6
        return z
    return fsm


C.smap("s.wide_node_rk4_state_tp_allgather.dp2xtp4", {"dp": 2, "tp": 4}, wide_node_sm,
       (P(None, "tp"), P("tp"), P("dp", "tp")), P("dp", "tp"), wide_node,
       (R(16, 16, scale=0.3), R(16, scale=0.2), R(4, 16)),
       bugs=[("stage-weights-wrong-on-shard-3", ["wrong-scale"]), ("stage4-from-stale-gather", ["wrong-operand"])])


# ---------------------------------------------------------------------------
# 11. incompressibility penalty of a velocity field v: R^4 -> R^4 (a
#     Navier-Stokes PINN's continuity term): the output layer's columns over
#     tp, one velocity component per rank; each rank takes the Jacobian row of
#     its component by jax.jacrev and keeps the entry d v_r / d x_r; the
#     divergence is psum'd over tp; points over dp.

def divergence(W1, b1, W3, X):
    v = lambda x: jnp.tanh(x @ W1 + b1) @ W3
    div = jax.vmap(lambda x: jnp.trace(jax.jacrev(v)(x)))(X)
    return div, jnp.mean(div ** 2)


def divergence_sm(bug):
    def f(W1, b1, W3, X):
        me = idx("tp")
        v = lambda x: jnp.tanh(x @ W1 + b1) @ W3  # (1,): this rank's component
        J = jax.vmap(jax.jacrev(v))(X)  # (n, 1, 4)
        col = 0 if bug == "component-index-0" else me
        part = lax.dynamic_index_in_dim(J[:, 0, :], col, axis=1, keepdims=False)
        div = part if bug == "divergence-not-psummed" else psum(part, "tp")
        return div, pmean(jnp.mean(div ** 2), "dp")
    return f


C.smap("s.divergence_free_penalty_out_tp.dp2xtp4", {"dp": 2, "tp": 4}, divergence_sm,
       (P(), P(), P(None, "tp"), P("dp")), (P("dp"), P()), divergence,
       (R(4, 16, scale=0.5), R(16, scale=0.2), R(16, 4, scale=0.5), R(16, 4)),
       bugs=[("component-index-0", ["wrong-offset"]), ("divergence-not-psummed", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 12. a continuous normalizing flow (FFJORD with the exact trace): Euler
#     steps in a lax.fori_loop integrate dz/dt = f(z, t) and d logdet/dt =
#     tr(df/dz) (jax.jacfwd per sample), samples over dp8; the negative
#     log-likelihood under a standard normal base averaged over the batch.

NS12, DT12 = 4, 0.25


def cnf_field(W1, b1, W2, z, t):
    return jnp.tanh(z @ W1[:2] + t * W1[2] + b1) @ W2


def cnf_nll_terms(W1, b1, W2, x):
    def body(i, c):
        z, ld = c
        t = i * DT12
        f = lambda zz: cnf_field(W1, b1, W2, zz, t)
        tr = jax.vmap(lambda zz: jnp.trace(jax.jacfwd(f)(zz)))(z)
        return z + DT12 * jax.vmap(f)(z), ld + DT12 * tr
    z, ld = lax.fori_loop(0, NS12, body, (x, jnp.zeros(x.shape[0], x.dtype)))
    return z, 0.5 * jnp.sum(z ** 2, 1) + np.log(2 * np.pi) - ld


def cnf_nll(W1, b1, W2, x):
    z, nll = cnf_nll_terms(W1, b1, W2, x)
    return z, jnp.mean(nll)


def cnf_sm(bug):
    def f(W1, b1, W2, x):
        z, nll = cnf_nll_terms(W1, b1, W2, x)
        if bug == "nll-local-mean":
            return z, jnp.mean(nll)
        if bug == "psum-of-local-means":
            return z, psum(jnp.mean(nll), "dp")
        return z, pmean(jnp.mean(nll), "dp")
    return f


C.smap("s.cnf_exact_trace_euler_fori.dp8", {"dp": 8}, cnf_sm, (P(), P(), P(), P("dp")), (P("dp"), P()), cnf_nll,
       (R(3, 16, scale=0.5), R(16, scale=0.2), R(16, 2, scale=0.5), R(32, 2)),
       bugs=[("nll-local-mean", ["missing-all-reduce"]), ("psum-of-local-means", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 13. the viscous Burgers residual u_t + u u_x - nu u_xx of a net whose
#     second layer is row-parallel with a reduce-scatter (psum_scatter over
#     the hidden dim, its bias passed replicated and sliced at the rank's
#     offset) and whose output layer is psum'd; every rank takes the
#     derivatives of its partial output by jax.jacfwd (twice for u_xx) and
#     psums u, u_t, u_x, u_xx together before forming the nonlinear term.

NU13 = 0.05


def burgers_res(W1, b1, W2, b2, w3, X):
    def u(x):
        h = jnp.tanh(x @ W1 + b1)
        return jnp.tanh(h @ W2 + b2) @ w3
    g = jax.vmap(jax.jacfwd(u))(X)
    uxx = jax.vmap(jax.jacfwd(jax.jacfwd(u)))(X)[:, 1, 1]
    r = g[:, 0] + jax.vmap(u)(X) * g[:, 1] - NU13 * uxx
    return r, jnp.mean(r ** 2)


def burgers_sm(bug):
    def f(W1, b1, W2, b2, w3, X):
        me = idx("tp")
        hl = W2.shape[1] // 4
        b2l = lax.dynamic_slice_in_dim(b2, 0 if bug == "bias-slice-at-offset-0" else me * hl, hl)
        w3l = lax.dynamic_slice_in_dim(w3, me * hl, hl)

        def u_part(x):
            h = jnp.tanh(x @ W1 + b1)
            y = lax.psum_scatter(h @ W2, "tp", scatter_dimension=0, tiled=True)
            return jnp.tanh(y + b2l) @ w3l
        up = jax.vmap(u_part)(X)
        gp = jax.vmap(jax.jacfwd(u_part))(X)
        uxxp = jax.vmap(jax.jacfwd(jax.jacfwd(u_part)))(X)[:, 1, 1]
        if bug == "nonlinear-term-from-partials":
            r = psum(gp[:, 0] + up * gp[:, 1] - NU13 * uxxp, "tp")
        else:
            uu, ut, ux, uxx = psum(jnp.stack([up, gp[:, 0], gp[:, 1], uxxp]), "tp")
            r = ut + uu * ux - NU13 * uxx
        return r, psum(jnp.sum(r ** 2), "dp") / (X.shape[0] * 2)
    return f


C.smap("s.burgers_residual_reduce_scatter_jacfwd.dp2xtp4", {"dp": 2, "tp": 4}, burgers_sm,
       (P(None, "tp"), P("tp"), P("tp", None), P(), P(), P("dp")), (P("dp"), P()), burgers_res,
       (R(2, 16, scale=0.8), R(16, scale=0.2), R(16, 16, scale=0.3), R(16, scale=0.2), R(16, scale=0.5),
        U(0, 1, 16, 2)),
       bugs=[("bias-slice-at-offset-0", ["wrong-offset"]), ("nonlinear-term-from-partials", ["wrong-reduction"])])


# ---------------------------------------------------------------------------
# 14. a symplectic (leapfrog) rollout of a learned Hamiltonian
#     H(q, p) = |p|^2 / 2 + V(q), the potential V a net with its hidden units
#     over tp (dV/dq of the partial potential psum'd), the states over dp, 5
#     steps in a lax.scan; returns the final states and the mean energy
#     drift over the batch.

DT14 = 0.1


def leapfrog(W1, b1, w2, q, p):
    V = lambda x: jnp.tanh(x @ W1 + b1) @ w2
    dV = jax.vmap(jax.grad(V))
    energy = lambda q, p: 0.5 * jnp.sum(p ** 2, 1) + jax.vmap(V)(q)

    def step(c, _):
        q, p = c
        p = p - 0.5 * DT14 * dV(q)
        q = q + DT14 * p
        p = p - 0.5 * DT14 * dV(q)
        return (q, p), None
    (qT, pT), _ = lax.scan(step, (q, p), None, length=5)
    return qT, pT, jnp.mean(jnp.abs(energy(qT, pT) - energy(q, p)))


def leapfrog_sm(bug):
    def f(W1, b1, w2, q, p):
        Vp = lambda x: jnp.tanh(x @ W1 + b1) @ w2
        dV = lambda q: psum(jax.vmap(jax.grad(Vp))(q), "tp")
        energy = lambda q, p: 0.5 * jnp.sum(p ** 2, 1) + psum(jax.vmap(Vp)(q), "tp")

        def step(c, _):
            q, p = c
            p = p - 0.5 * DT14 * dV(q)
            q = q + DT14 * p
            p = p - 0.5 * DT14 * (jax.vmap(jax.grad(Vp))(q) if bug == "second-kick-not-psummed" else dV(q))
            return (q, p), None
        (qT, pT), _ = lax.scan(step, (q, p), None, length=5)
        drift = jnp.sum(jnp.abs(energy(qT, pT) - energy(q, p)))
        if bug == "drift-mean-local":
            return qT, pT, drift / q.shape[0]
        return qT, pT, psum(drift, "dp") / (q.shape[0] * 2)
    return f


C.smap("s.leapfrog_learned_potential_scan.dp2xtp4", {"dp": 2, "tp": 4}, leapfrog_sm,
       (P(None, "tp"), P("tp"), P("tp"), P("dp"), P("dp")), (P("dp"), P("dp"), P()), leapfrog,
       (R(2, 16, scale=0.6), R(16, scale=0.2), R(16, scale=0.6), R(8, 2), R(8, 2)),
       bugs=[("second-kick-not-psummed", ["missing-all-reduce"]), ("drift-mean-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# GSPMD pairs (jax.jit with in/out shardings), correct only.
# 15. the Poisson PINN loss of 1. with the hidden units over tp and the
#     interior points over dp.
C.gspmd("g.pinn_poisson_hessian_trace.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P("tp"), P(), P("dp"), P(), P()), (P(), P("dp")), pinn_poisson,
        (R(2, 16), R(16, scale=0.5), R(16, scale=0.5), np.float32(0.1), U(0, 1, 32, 2), XB1, R(8, scale=0.1)))

# 16. the jvp-of-grad Hessian-vector product of 2. with theta, A's columns
#     and the tangent over dp8.
C.gspmd("g.hvp_fwd_over_rev_sharded_theta.dp8", {"dp": 8}, (P("dp"), P(None, "dp"), P("dp"), P("dp")),
        (P("dp"), P("dp")), hvp_ref, (R(32, scale=0.5), R(6, 32, scale=0.3), np.abs(R(32)) + 0.5, R(32)))

# 17. the RK4 lax.scan neural ODE of 3. (hidden over tp, batch over dp).
C.gspmd("g.node_rk4_scan_hidden_tp.dp4xtp2", {"dp": 4, "tp": 2},
        (P(None, "tp"), P("tp"), P("tp", None), P(), P("dp")), P(None, "dp"), node_traj,
        (R(4, 16, scale=0.5), R(16, scale=0.3), R(16, 4, scale=0.4), R(4, scale=0.2), R(8, 4)))

# 18. the heat-equation PINN training step of 8. (two adam steps) with the
#     parameters and adam moments under the tp shardings of 8.
C.gspmd("g.pinn_heat_train_step_adam_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC8, SS8, P("dp"), P(), P()),
        (SPEC8, SS8, P()), heat_train, (P8, S8, XI8, XB8, GB8))


# 19. the Hamiltonian network of 5.: the loss and its gradient w.r.t. the
#     energy's parameters (jax.value_and_grad), states over dp.
def hnn_value_grad(W1, b1, w2, Z, dZ):
    return jax.value_and_grad(lambda a, b, c: hnn(a, b, c, Z, dZ)[1], argnums=(0, 1, 2))(W1, b1, w2)


C.gspmd("g.hamiltonian_nn_loss_grad.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P("tp"), P("dp"), P("dp")), (P(), (P(None, "tp"), P("tp"), P("tp"))),
        hnn_value_grad, (R(4, 16, scale=0.5), R(16, scale=0.3), R(16, scale=0.5), R(16, 4), R(16, 4)))

C.finish()
