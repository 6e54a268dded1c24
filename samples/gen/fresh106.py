"""samples/fresh106: a 106th batch of programs as a user writes them, on the theme of higher-order automatic differentiation under sharding (Hessian-vector products forward-over-reverse and reverse-over-reverse, Gauss-Newton and empirical-Fisher products, Hutchinson trace estimates, PINN Laplacians by jacfwd(jacrev) and by nested jvp, sharpness-aware minimisation, MAML and Reptile inner loops, implicit differentiation through a custom_vjp solve, WGAN-GP and R1 gradient penalties, jax.hessian Newton steps, DP-SGD per-example gradient norms), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. HVP of a regression MLP by jax.jvp of jax.grad, rows over dp4, parameters
    and tangent replicated, the local row sums' HVPs psum'd and divided by the
    global batch (check_vma=False). Bugs: HVP not reduced, divided by the local
    row count.
 2. HVP reverse over reverse (grad of <grad L, v>) of a Megatron MLP (hidden
    units over tp4, output psum'd, b2 replicated), rows over dp2, the loss
    pmean'd over dp inside the differentiated function, <g, v> psum'd over tp
    for the sharded leaves; check_vma=True. Bugs: loss psum'd over dp, b2
    added inside the tp psum.
 3. Gauss-Newton-vector product of softmax cross-entropy (J^T H_L J v by jvp
    and vjp) with damping, rows over dp4. Bugs: damping added before the psum
    (counted 4 times), product not reduced.
 4. Hutchinson trace of the Hessian w.r.t. ravel_pytree'd parameters: 8
    Rademacher probes over "mc"4, rows over dp2, HVPs psum'd over dp, z.Hz
    psum'd over mc / K. Bugs: HVP psum'd over mc instead of dp, probe count
    the local one.
 5. PINN for -lap u = f in 2-D, Laplacian as the trace of
    jacfwd(jacrev(u)), interior and boundary points over dp8, the two terms'
    gradients pmean'd, optax.adam step. Bugs: gradients not reduced, the
    boundary gradient psum'd.
 6. Helmholtz residual lap u + k^2 u - f in 3-D with the Laplacian by nested
    jax.jvp, points over sp2, hidden units over tp4, partial u and lap u
    psum'd together, output bias after. Bugs: Laplacian not psum'd, bias
    inside the partial (counted 4 times).
 7. SAM: ascent along the pmean'd gradient normalised, descent gradient at the
    perturbed point pmean'd, optax.sgd(momentum), rows over dp4. Bugs: ascent
    gradient local (m-sharpness by accident), each device's gradient
    normalised before the pmean.
 8. MAML on sinusoid tasks over dp4 (2 per device), 3 inner SGD steps in
    lax.fori_loop differentiated through (second order), meta-gradient pmean'd,
    optax.adam. Bugs: meta-gradient local, psum'd.
 9. Reptile, one task per device over dp8, inner lax.scan over 3 minibatches,
    phi + eps (mean phi_i - phi). Bugs: deltas psum'd, mean local.
10. implicit differentiation of ridge regression: forward by 5 CG steps in
    lax.fori_loop with the Gram matvec psum'd, a jax.custom_vjp whose backward
    solves the adjoint system by Cholesky of the psum'd Gram, rows over dp4,
    hypergradient of the validation loss psum'd. Bugs: adjoint Gram local,
    hypergradient not summed.
11. WGAN-GP critic step: eps replicated and sliced at the dp offset,
    per-example input gradients by vmap(grad), double backprop, gradients
    pmean'd, optax.adam(b1=0.5, eps=1e-3). Bugs: eps slice at offset 0,
    gradients psum'd.
12. R1 penalty per real example, critic hidden units over tp4, partial input
    gradients psum'd over tp before the squared norm, rows over dp2. Bugs: sum
    of partial squared norms, gradient psum'd over dp.
13. damped Newton step of L2 logistic regression with jax.hessian, rows over
    dp8, gradient and Hessian psum'd, ridge once, jnp.linalg.solve. Bugs:
    ridge before the psum, Hessian not reduced.
14. DP-SGD: per-example gradients by vmap(grad), global-norm clipping, clipped
    sum psum'd, noise (an input) added once, over the global batch; also the
    per-example norms. Bugs: noise added before the psum, local batch divisor.
15. natural-gradient direction (TRPO style): empirical-Fisher-vector products
    from per-example gradients inside 5 CG steps (lax.fori_loop), damping,
    rows over dp4, products psum'd in every matvec. Bugs: FVP on local rows,
    damping inside the psum.
GSPMD pairs (jax.jit with in/out shardings): 16. the jvp-of-grad HVP of 1.
on dp8; 17. the Gauss-Newton product of 3. with hidden units over tp4 and rows
over dp2; 18. the Poisson PINN loss of 5. and its gradient, points over dp8;
19. the MAML meta step of 8., tasks over dp4; 20. the jax.hessian Newton step
of 13. on dp8; 21. the WGAN-GP critic step of 11., batch and eps over dp4.
Numerics: every correct pair agrees with its baseline at rounding level (f32,
at most 1.5e-5 on values up to 112 in 18.); every bug variant differs clearly
(the smallest: SAM's, ~3e-3 on parameters ~1). First drafts changed for their
numerics: the ridge hypergradient first solved the adjoint system by truncated
CG on each device's cotangent and psum'd the results -- truncated CG is not
linear in its right-hand side, so that "correct" body was not; the adjoint is
now an exact Cholesky solve. CG runs at most 5 steps (fewer than the
dimension; 12 steps on 6 dims broke down at rr = 0) and the Fisher damping is
0.1. The WGAN-GP Adam eps is 1e-3 (with 1e-8 a near-zero bias gradient
amplified rounding to 9e-4). The reverse-over-reverse HVP first took <g, v>
of the local shards without a psum over tp (not the HVP).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh106.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P, NamedSharding
from jax.flatten_util import ravel_pytree
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh106.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh106.py"
C = Corpus("samples/fresh106", SCRIPT, "samples/gen/run_fresh106.sh", sys.argv[1:])
rng, R, I = seeded(10606)
psum, pmean, idx = lax.psum, lax.pmean, lax.axis_index
tmap = jax.tree.map


def tdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def mlp(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def mlp_params(din, h, dout, s=0.5):
    return {"w1": R(din, h, scale=s), "b1": R(h, scale=0.1), "w2": R(h, dout, scale=s), "b2": R(dout, scale=0.1)}


def sq_loss(p, x, y):
    return jnp.mean(jnp.sum(jnp.square(mlp(p, x) - y), -1))


# ---------------------------------------------------------------------------
# 1. Hessian-vector product of a regression loss, forward over reverse
#    (jax.jvp of jax.grad), batch over dp4, parameters and tangent replicated;
#    each device differentiates the sum over its rows and the HVPs are
#    psum'd and divided by the global batch.
B1, D1, H1, O1 = 16, 4, 8, 2
P1, V1 = mlp_params(D1, H1, O1), mlp_params(D1, H1, O1, s=1.0)


def hvp_fwd_rev(p, v, x, y):
    return jax.jvp(lambda q: jax.grad(sq_loss)(q, x, y), (p,), (v,))[1]


def hvp_dp(bug):
    def f(p, v, x, y):
        def local_sum(q):
            return jnp.sum(jnp.square(mlp(q, x) - y))
        hv = jax.jvp(jax.grad(local_sum), (p,), (v,))[1]
        if bug == "hvp-not-reduced":
            return tmap(lambda a: a / B1, hv)
        n = x.shape[0] if bug == "local-row-count" else B1
        return tmap(lambda a: psum(a, "dp") / n, hv)
    return f


C.smap("s.hvp_jvp_of_grad_rows.dp4", {"dp": 4}, hvp_dp, (P(), P(), P("dp"), P("dp")), P(), hvp_fwd_rev,
       (P1, V1, R(B1, D1), R(B1, O1)),
       bugs=[("hvp-not-reduced", ["missing-all-reduce"]), ("local-row-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. Hessian-vector product reverse over reverse (grad of <grad L, v>) of a
#    tensor-parallel MLP (hidden units over tp4: w1's columns, b1 and w2's rows
#    sharded, the output psum'd, b2 replicated), batch over dp2, the loss
#    pmean'd over dp inside the differentiated function; check_vma=True so
#    the transposes of psum / pmean are the right ones. The HVP comes out
#    with the parameters' shardings.
B2, D2, H2, O2 = 8, 4, 16, 3
P2, V2 = mlp_params(D2, H2, O2), mlp_params(D2, H2, O2, s=1.0)
SPEC2 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}


def hvp_rev_rev(p, v, x, y):
    return jax.grad(lambda q: tdot(jax.grad(sq_loss)(q, x, y), v))(p)


def hvp_tp(bug):
    def f(p, v, x, y):
        def model(q):
            part = jnp.tanh(x @ q["w1"] + q["b1"]) @ q["w2"]
            if bug == "b2-inside-psum":
                return psum(part + q["b2"], "tp")
            return psum(part, "tp") + q["b2"]

        def loss(q):
            l = jnp.mean(jnp.sum(jnp.square(model(q) - y), -1))
            return psum(l, "dp") if bug == "loss-psum-dp" else pmean(l, "dp")
        def gdot_v(q):
            g = jax.grad(loss)(q)
            part = sum(jnp.vdot(g[k], v[k]) for k in ("w1", "b1", "w2"))
            return psum(part, "tp") + jnp.vdot(g["b2"], v["b2"])
        return jax.grad(gdot_v)(p)
    return f


C.smap("s.hvp_grad_of_grad_dot_v_megatron.dp2xtp4", {"dp": 2, "tp": 4}, hvp_tp,
       (SPEC2, SPEC2, P("dp"), P("dp")), SPEC2, hvp_rev_rev, (P2, V2, R(B2, D2), R(B2, O2)), check_vma=True,
       bugs=[("loss-psum-dp", ["wrong-scale"]), ("b2-inside-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. Gauss-Newton-vector product of softmax cross-entropy (G v = J^T H_L J v
#    with H_L = diag(p) - p p^T), batch over dp4, parameters replicated,
#    damping lam * v; J v by jax.jvp, J^T by jax.vjp on the local rows,
#    the products psum'd over dp and divided by the global batch.
B3, D3, H3, O3 = 16, 6, 8, 5
P3, V3 = mlp_params(D3, H3, O3), mlp_params(D3, H3, O3, s=1.0)
LAM3 = 0.1


def ggn_rows(p, v, x):
    z, jv = jax.jvp(lambda q: mlp(q, x), (p,), (v,))
    pr = jax.nn.softmax(z, -1)
    hjv = pr * jv - pr * jnp.sum(pr * jv, -1, keepdims=True)
    return jax.vjp(lambda q: mlp(q, x), p)[1](hjv)[0]


def ggn(p, v, x):
    return tmap(lambda a, b: a / B3 + LAM3 * b, ggn_rows(p, v, x), v)


def ggn_dp(bug):
    def f(p, v, x):
        g = ggn_rows(p, v, x)
        if bug == "damping-before-psum":
            return tmap(lambda a, b: psum(a / B3 + LAM3 * b, "dp"), g, v)
        if bug == "gnvp-not-reduced":
            return tmap(lambda a, b: a / B3 + LAM3 * b, g, v)
        return tmap(lambda a, b: psum(a, "dp") / B3 + LAM3 * b, g, v)
    return f


C.smap("s.gauss_newton_vp_softmax_ce.dp4", {"dp": 4}, ggn_dp, (P(), P(), P("dp")), P(), ggn,
       (P3, V3, R(B3, D3)),
       bugs=[("damping-before-psum", ["wrong-scale"]), ("gnvp-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. Hutchinson estimate of the trace of the Hessian of a logistic-MLP loss
#    with respect to the flattened parameters (ravel_pytree): 8 Rademacher
#    probes over the "mc" axis (2 per device), rows over dp2; per probe an
#    HVP of the local row sum psum'd over dp, z . Hz summed over local probes
#    and psum'd over mc, divided by the probe count.
B4, D4, H4, K4 = 8, 5, 6, 8
P4 = mlp_params(D4, H4, 1)
_, UNR4 = ravel_pytree(P4)
NP4 = ravel_pytree(P4)[0].size
Z4 = np.where(rng.random((K4, NP4)) < 0.5, -1.0, 1.0).astype(np.float32)


def logit_loss_sum(theta, x, y):
    z = mlp(UNR4(theta), x)[:, 0]
    return jnp.sum(optax.sigmoid_binary_cross_entropy(z, y))


def hutch(theta, z, x, y):
    hz = jax.vmap(lambda zz: jax.jvp(jax.grad(logit_loss_sum), (theta, x, y), (zz, jnp.zeros_like(x),
                                                                                 jnp.zeros_like(y)))[1])(z) / B4
    return jnp.mean(jnp.sum(z * hz, -1))


def hutch_dp_mc(bug):
    def f(theta, z, x, y):
        def hvp(zz):
            return jax.jvp(lambda t: jax.grad(logit_loss_sum)(t, x, y), (theta,), (zz,))[1]
        hz = jax.vmap(hvp)(z)
        hz = psum(hz, "mc" if bug == "hvp-psum-over-mc" else "dp") / B4
        q = jnp.sum(z * hz)
        k = z.shape[0] if bug == "probe-count-local" else K4
        return psum(q, "mc") / k
    return f


C.smap("s.hutchinson_hessian_trace_probes.dp2xmc4", {"dp": 2, "mc": 4}, hutch_dp_mc,
       (P(), P("mc"), P("dp"), P("dp")), P(), hutch,
       (ravel_pytree(P4)[0], Z4, R(B4, D4), (rng.random(B4) < 0.5).astype(np.float32)),
       bugs=[("hvp-psum-over-mc", ["wrong-axis"]), ("probe-count-local", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 5. PINN for the 2-D Poisson problem -lap u = f: Laplacian as the trace of
#    jax.jacfwd(jax.jacrev(u)), interior and boundary collocation points over
#    dp8, network replicated; an optax.adam step with the gradients of the
#    two mean terms pmean'd separately (check_vma=False, local grads).
NI5, NB5, H5 = 32, 16, 12
P5 = {"w1": R(2, H5), "b1": R(H5, scale=0.1), "w2": R(H5, H5, scale=0.4), "b2": R(H5, scale=0.1),
      "w3": R(H5, 1, scale=0.4)}
OPT5 = optax.adam(1e-2)
S5 = OPT5.init(P5)


def pinn_u(p, xy):
    h = jnp.tanh(xy @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return (h @ p["w3"])[0]


def lap_hess(p, xy):
    return jnp.trace(jax.jacfwd(jax.jacrev(pinn_u, 1), 1)(p, xy))


def src(xy):
    return 2 * np.pi ** 2 * jnp.sin(np.pi * xy[..., 0]) * jnp.sin(np.pi * xy[..., 1])


def interior_loss(p, xi):
    r = jax.vmap(lambda a: lap_hess(p, a))(xi) + src(xi)
    return jnp.mean(r ** 2)


def boundary_loss(p, xb):
    return jnp.mean(jax.vmap(lambda a: pinn_u(p, a))(xb) ** 2)


def pinn_step(p, s, xi, xb):
    g = jax.grad(lambda q: interior_loss(q, xi) + boundary_loss(q, xb))(p)
    up, s = OPT5.update(g, s, p)
    return optax.apply_updates(p, up), s


def pinn_dp(bug):
    def f(p, s, xi, xb):
        gi = jax.grad(interior_loss)(p, xi)
        gb = jax.grad(boundary_loss)(p, xb)
        if bug == "grads-not-reduced":
            g = tmap(jnp.add, gi, gb)
        elif bug == "boundary-grad-psum":
            g = tmap(lambda a, b: pmean(a, "dp") + psum(b, "dp"), gi, gb)
        else:
            g = tmap(lambda a, b: pmean(a, "dp") + pmean(b, "dp"), gi, gb)
        up, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, up), s
    return f


XB5 = np.concatenate([np.stack([np.zeros(4), np.linspace(0, 1, 4)], 1), np.stack([np.ones(4), np.linspace(0, 1, 4)], 1),
                      np.stack([np.linspace(0, 1, 4), np.zeros(4)], 1), np.stack([np.linspace(0, 1, 4), np.ones(4)], 1)]
                     ).astype(np.float32)
C.smap("s.pinn_poisson_jacfwd_jacrev_adam.dp8", {"dp": 8}, pinn_dp, (P(), P(), P("dp"), P("dp")), P(), pinn_step,
       (P5, S5, rng.random((NI5, 2)).astype(np.float32), XB5),
       bugs=[("grads-not-reduced", ["missing-all-reduce"]), ("boundary-grad-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. Helmholtz residual lap u + k^2 u - f in 3-D with the Laplacian from
#    nested jax.jvp along the basis vectors (forward over forward), points
#    over sp2, the net's hidden units over tp4 (w1 columns, b1, w2 rows);
#    the Laplacian is linear in the output, so each rank takes it of its
#    partial output and u and lap u are psum'd together; output bias after.
NP6, H6 = 8, 16
P6 = {"w1": R(3, H6), "b1": R(H6, scale=0.1), "w2": R(H6, scale=0.4), "b2": np.float32(0.3)}
SPEC6 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
K6 = 2.0


def lap_fwdfwd(u, x):
    def d2(e):
        return jax.jvp(lambda y: jax.jvp(u, (y,), (e,))[1], (x,), (e,))[1]
    return sum(d2(e) for e in jnp.eye(x.shape[0], dtype=x.dtype))


def helm_part(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def helmholtz(p, xs, f):
    def one(x):
        u = helm_part(p, x) + p["b2"]
        return lap_fwdfwd(lambda y: helm_part(p, y), x) + K6 ** 2 * u
    return jax.vmap(one)(xs) - f


def helm_sp_tp(bug):
    def f(p, xs, fv):
        def one(x):
            if bug == "bias-inside-partial":
                return jnp.stack([helm_part(p, x) + p["b2"], lap_fwdfwd(lambda y: helm_part(p, y) + p["b2"], x)])
            return jnp.stack([helm_part(p, x), lap_fwdfwd(lambda y: helm_part(p, y), x)])
        ul = jax.vmap(one)(xs)
        if bug == "laplacian-not-psummed":
            u, lap = psum(ul[:, 0], "tp"), ul[:, 1]
        else:
            ul = psum(ul, "tp")
            u, lap = ul[:, 0], ul[:, 1]
        if bug != "bias-inside-partial":
            u = u + p["b2"]
        return lap + K6 ** 2 * u - fv
    return f


C.smap("s.helmholtz_residual_nested_jvp.sp2xtp4", {"sp": 2, "tp": 4}, helm_sp_tp, (SPEC6, P("sp"), P("sp")),
       P("sp"), helmholtz, (P6, rng.random((NP6, 3)).astype(np.float32), R(NP6)),
       bugs=[("laplacian-not-psummed", ["missing-all-reduce"]), ("bias-inside-partial", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. sharpness-aware minimisation: ascent to p + rho g / |g| with the
#    pmean'd gradient, descent gradient at the perturbed point pmean'd and
#    applied at p with optax.sgd(momentum); batch over dp4, params replicated.
B7, D7, H7, O7 = 16, 6, 10, 4
P7 = mlp_params(D7, H7, O7)
OPT7 = optax.sgd(0.05, momentum=0.9)
S7 = OPT7.init(P7)
RHO = 0.05


def ce_loss(p, x, y):
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(mlp(p, x), y))


def unit(g):
    n = jnp.sqrt(sum(jnp.sum(a * a) for a in jax.tree.leaves(g)))
    return tmap(lambda a: a / (n + 1e-12), g)


def sam_step(p, s, x, y):
    g = jax.grad(ce_loss)(p, x, y)
    e = tmap(lambda a: RHO * a, unit(g))
    g2 = jax.grad(ce_loss)(tmap(jnp.add, p, e), x, y)
    up, s = OPT7.update(g2, s, p)
    return optax.apply_updates(p, up), s


def sam_dp(bug):
    def f(p, s, x, y):
        g = jax.grad(ce_loss)(p, x, y)
        if bug == "normalise-before-pmean":
            d = tmap(lambda a: pmean(a, "dp"), unit(g))
        elif bug == "ascent-grad-local":
            d = unit(g)
        else:
            d = unit(tmap(lambda a: pmean(a, "dp"), g))
        g2 = tmap(lambda a: pmean(a, "dp"), jax.grad(ce_loss)(tmap(lambda a, b: a + RHO * b, p, d), x, y))
        up, s = OPT7.update(g2, s, p)
        return optax.apply_updates(p, up), s
    return f


C.smap("s.sam_ascent_descent_sgd_momentum.dp4", {"dp": 4}, sam_dp, (P(), P(), P("dp"), P("dp")), P(), sam_step,
       (P7, S7, R(B7, D7), I(0, O7, B7)),
       bugs=[("ascent-grad-local", ["missing-all-reduce"]), ("normalise-before-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 8. MAML on sinusoid regression: 8 tasks over dp4 (2 per device), an
#    inner loop of 3 SGD steps on the support set in lax.fori_loop, the
#    query loss differentiated through it (second order), meta-gradient
#    averaged over tasks (local mean, pmean over dp), optax.adam meta step.
T8, NS8, H8 = 8, 6, 12
P8 = mlp_params(1, H8, 1)
OPT8 = optax.adam(1e-3)
S8 = OPT8.init(P8)
ALPHA = 0.1


def inner_adapt(p, xs, ys):
    def body(_, q):
        g = jax.grad(sq_loss)(q, xs, ys)
        return tmap(lambda a, b: a - ALPHA * b, q, g)
    return lax.fori_loop(0, 3, body, p)


def maml_task_loss(p, xs, ys, xq, yq):
    return sq_loss(inner_adapt(p, xs, ys), xq, yq)


def maml_meta_grad(p, xs, ys, xq, yq):
    return jax.grad(lambda q: jnp.mean(jax.vmap(maml_task_loss, (None, 0, 0, 0, 0))(q, xs, ys, xq, yq)))(p)


def maml_step(p, s, xs, ys, xq, yq):
    g = maml_meta_grad(p, xs, ys, xq, yq)
    up, s = OPT8.update(g, s, p)
    return optax.apply_updates(p, up), s


def maml_dp(bug):
    def f(p, s, xs, ys, xq, yq):
        g = maml_meta_grad(p, xs, ys, xq, yq)
        if bug == "meta-grad-psum":
            g = tmap(lambda a: psum(a, "dp"), g)
        elif bug != "meta-grad-local":
            g = tmap(lambda a: pmean(a, "dp"), g)
        up, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, up), s
    return f


def sine_tasks(n, k):
    amp, ph = rng.uniform(0.5, 2.0, (n, 1, 1)), rng.uniform(0, np.pi, (n, 1, 1))
    x = rng.uniform(-3, 3, (n, k, 1))
    return x.astype(np.float32), (amp * np.sin(x + ph)).astype(np.float32)


XS8, YS8 = sine_tasks(T8, NS8)
XQ8, YQ8 = sine_tasks(T8, NS8)
C.smap("s.maml_fori_inner_sgd_meta_adam.dp4", {"dp": 4}, maml_dp, (P(), P()) + (P("dp"),) * 4, P(), maml_step,
       (P8, S8, XS8, YS8, XQ8, YQ8),
       bugs=[("meta-grad-local", ["missing-all-reduce"]), ("meta-grad-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. Reptile: one task per device over dp8, an inner lax.scan of SGD steps
#    over 3 support minibatches, then phi <- phi + eps (mean_tasks phi_i - phi);
#    returns the new meta parameters.
EPS9 = 0.5
P9 = mlp_params(2, 8, 1)


def reptile_inner(p, xb, yb):
    def step(q, b):
        g = jax.grad(sq_loss)(q, b[0], b[1])
        return tmap(lambda a, c: a - 0.05 * c, q, g), None
    return lax.scan(step, p, (xb, yb))[0]


def reptile(p, xb, yb):
    adapted = jax.vmap(reptile_inner, (None, 0, 0))(p, xb, yb)
    return tmap(lambda a, b: a + EPS9 * (jnp.mean(b, 0) - a), p, adapted)


def reptile_dp(bug):
    def f(p, xb, yb):
        q = reptile_inner(p, xb[0], yb[0])
        if bug == "delta-psum":
            return tmap(lambda a, b: a + EPS9 * psum(b - a, "dp"), p, q)
        if bug == "meta-mean-local":
            return tmap(lambda a, b: a + EPS9 * (b - a), p, q)
        return tmap(lambda a, b: a + EPS9 * (pmean(b, "dp") - a), p, q)
    return f


C.smap("s.reptile_scan_inner_meta_interp.dp8", {"dp": 8}, reptile_dp, (P(), P("dp"), P("dp")), P(), reptile,
       (P9, R(8, 3, 4, 2), R(8, 3, 4, 1)),
       bugs=[("delta-psum", ["wrong-scale"]), ("meta-mean-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 10. implicit differentiation of ridge regression w*(lam) = (X^T X + e^a I)^-1
#     X^T y: the forward solve by 5 conjugate-gradient steps (lax.fori_loop)
#     with the Gram matvec psum'd over dp4, under a jax.custom_vjp whose
#     backward pass solves the adjoint system exactly (Cholesky of the
#     psum'd Gram); training and validation rows over dp4; each device
#     differentiates its validation rows' share and the hypergradients
#     (linear in the cotangent) are psum'd. Returns the validation loss and
#     d/da.
N10, D10, NV10 = 16, 8, 8


def cg(mv, b, iters=5):
    def body(_, c):
        x, r, d, rr = c
        ad = mv(d)
        a = rr / jnp.vdot(d, ad)
        x, r = x + a * d, r - a * ad
        rr2 = jnp.vdot(r, r)
        return x, r, r + (rr2 / rr) * d, rr2
    return lax.fori_loop(0, iters, body, (jnp.zeros_like(b), b, b, jnp.vdot(b, b)))[0]


def make_ridge(gram, reduce, bwd_gram=None):
    bwd_gram = bwd_gram or gram

    @jax.custom_vjp
    def solve(a, X, y):
        return cg(lambda v: gram(X) @ v + jnp.exp(a) * v, reduce(X.T @ y))

    def fwd(a, X, y):
        w = solve(a, X, y)
        return w, (a, X, w)

    def bwd(res, g):
        a, X, w = res
        A = bwd_gram(X) + jnp.exp(a) * jnp.eye(X.shape[1])
        u = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A), g)
        return -jnp.exp(a) * jnp.vdot(u, w), jnp.zeros_like(X), X @ u

    solve.defvjp(fwd, bwd)
    return solve


SOLVE1 = make_ridge(lambda X: X.T @ X, lambda t: t)


def hyper(a, X, y, Xv, yv):
    def val(a):
        w = SOLVE1(a, X, y)
        return jnp.sum(jnp.square(Xv @ w - yv)) / NV10
    return jax.value_and_grad(val)(a)


def hyper_dp(bug):
    def f(a, X, y, Xv, yv):
        gram = lambda X_: psum(X_.T @ X_, "dp")
        # bug: the adjoint system with the local Gram
        solve = make_ridge(gram, lambda t: psum(t, "dp"),
                           (lambda X_: X_.T @ X_) if bug == "adjoint-gram-local" else None)

        def val_local(a_):
            w = solve(a_, X, y)
            return jnp.sum(jnp.square(Xv @ w - yv)) / NV10
        l, g = jax.value_and_grad(val_local)(a)
        if bug == "hypergrad-not-summed":
            return psum(l, "dp"), g
        return psum(l, "dp"), psum(g, "dp")
    return f


XT10 = R(N10, D10)
C.smap("s.ridge_hypergrad_custom_vjp_cg.dp4", {"dp": 4}, hyper_dp, (P(), P("dp"), P("dp"), P("dp"), P("dp")), P(),
       hyper, (np.float32(0.2), XT10, XT10 @ R(D10) + R(N10, scale=0.3), R(NV10, D10), R(NV10)),
       bugs=[("adjoint-gram-local", ["missing-all-reduce"]), ("hypergrad-not-summed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 11. WGAN-GP critic step: interpolates x_hat = eps x_real + (1 - eps) x_fake
#     with eps passed replicated for the global batch and sliced at the dp
#     offset, per-example input gradients of the critic by jax.vmap(jax.grad),
#     penalty (|grad| - 1)^2, gradient of the critic loss (double backprop)
#     pmean'd over dp4, optax.adam (b1 = 0.5) step.
B11, D11, H11 = 16, 6, 12
P11 = mlp_params(D11, H11, 1)
OPT11 = optax.adam(1e-3, b1=0.5, b2=0.9, eps=1e-3)
S11 = OPT11.init(P11)
LGP = 10.0


def critic(p, x):
    h = jax.nn.leaky_relu(x @ p["w1"] + p["b1"], 0.2)
    return (h @ p["w2"] + p["b2"])[..., 0]


def wgan_gp_loss(p, xr, xf, eps):
    xh = eps[:, None] * xr + (1 - eps[:, None]) * xf
    gx = jax.vmap(jax.grad(critic, 1), (None, 0))(p, xh)
    gp = jnp.mean(jnp.square(jnp.sqrt(jnp.sum(gx * gx, -1) + 1e-12) - 1))
    return jnp.mean(critic(p, xf)) - jnp.mean(critic(p, xr)) + LGP * gp


def wgan_step(p, s, xr, xf, eps):
    l, g = jax.value_and_grad(wgan_gp_loss)(p, xr, xf, eps)
    up, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, up), s, l


def wgan_dp(bug):
    def f(p, s, xr, xf, eps):
        b = xr.shape[0]
        off = 0 if bug == "eps-slice-offset-0" else idx("dp") * b
        e = lax.dynamic_slice_in_dim(eps, off, b)
        l, g = jax.value_and_grad(wgan_gp_loss)(p, xr, xf, e)
        g = tmap(lambda a: psum(a, "dp") if bug == "critic-grad-psum" else pmean(a, "dp"), g)
        up, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, up), s, pmean(l, "dp")
    return f


C.smap("s.wgan_gp_critic_step_double_backprop.dp4", {"dp": 4}, wgan_dp, (P(), P(), P("dp"), P("dp"), P()), P(),
       wgan_step, (P11, S11, R(B11, D11), R(B11, D11, scale=1.5), rng.random(B11).astype(np.float32)),
       bugs=[("eps-slice-offset-0", ["wrong-offset"]), ("critic-grad-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 12. R1 penalty |grad_x D(x)|^2 per real example for a critic whose hidden
#     units are over tp4 (w1 columns, b1, w2 rows): each rank takes the
#     input gradient of its partial score (jax.vmap(jax.grad)), the partial
#     gradients are psum'd over tp before the squared norm; batch over dp2.
B12, D12, H12 = 8, 5, 16
P12 = mlp_params(D12, H12, 1)
SPEC12 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}


def critic_tanh(p, x):
    return (jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])[0]


def r1(p, x):
    g = jax.vmap(jax.grad(critic_tanh, 1), (None, 0))(p, x)
    return jnp.sum(g * g, -1)


def r1_tp(bug):
    def f(p, x):
        g = jax.vmap(jax.grad(lambda x1: (jnp.tanh(x1 @ p["w1"] + p["b1"]) @ p["w2"])[0]))(x)
        if bug == "sum-of-partial-norms":
            return psum(jnp.sum(g * g, -1), "tp")
        g = psum(g, "dp" if bug == "grad-psum-over-dp" else "tp")
        return jnp.sum(g * g, -1)
    return f


C.smap("s.r1_penalty_partial_input_grads.dp2xtp4", {"dp": 2, "tp": 4}, r1_tp, (SPEC12, P("dp")), P("dp"), r1,
       (P12, R(B12, D12)),
       bugs=[("sum-of-partial-norms", ["wrong-reduction"]), ("grad-psum-over-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 13. a damped Newton step of L2-regularised logistic regression with the
#     Hessian from jax.hessian: rows over dp8, the local sums' gradient and
#     Hessian psum'd, ridge added once, jnp.linalg.solve.
N13, D13, RIDGE = 32, 6, 0.5


def logreg_sum(w, X, y):
    return jnp.sum(optax.sigmoid_binary_cross_entropy(X @ w, y))


def newton(w, X, y):
    g = jax.grad(logreg_sum)(w, X, y) / N13 + RIDGE * w
    H = jax.hessian(logreg_sum)(w, X, y) / N13 + RIDGE * jnp.eye(D13)
    return w - jnp.linalg.solve(H, g)


def newton_dp(bug):
    def f(w, X, y):
        g = psum(jax.grad(logreg_sum)(w, X, y), "dp") / N13 + RIDGE * w
        Hl = jax.hessian(logreg_sum)(w, X, y)
        if bug == "ridge-before-psum":
            H = psum(Hl / N13 + RIDGE * jnp.eye(D13), "dp")
        elif bug == "hessian-not-reduced":
            H = Hl / N13 + RIDGE * jnp.eye(D13)
        else:
            H = psum(Hl, "dp") / N13 + RIDGE * jnp.eye(D13)
        return w - jnp.linalg.solve(H, g)
    return f


C.smap("s.newton_step_jax_hessian_logreg.dp8", {"dp": 8}, newton_dp, (P(), P("dp"), P("dp")), P(), newton,
       (R(D13, scale=0.3), R(N13, D13), (rng.random(N13) < 0.4).astype(np.float32)),
       bugs=[("ridge-before-psum", ["wrong-scale"]), ("hessian-not-reduced", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. DP-SGD: per-example gradients by jax.vmap(jax.grad), per-example norms
#     over the whole tree, clipping to CLIP, the clipped sum psum'd over dp4,
#     Gaussian noise (passed in) added once, divided by the global batch;
#     returns the private gradient and the per-example norms (batch over dp).
B14, CLIP, SIG = 16, 1.0, 0.8
P14 = mlp_params(5, 8, 3)


def per_example(p, x, y):
    g = jax.vmap(jax.grad(lambda q, a, b: ce_loss(q, a[None], b[None])), (None, 0, 0))(p, x, y)
    n = jnp.sqrt(sum(jnp.sum(jnp.reshape(a * a, (a.shape[0], -1)), 1) for a in jax.tree.leaves(g)))
    c = jnp.minimum(1.0, CLIP / (n + 1e-6))
    return tmap(lambda a: jnp.einsum("b,b...->...", c, a), g), n


def dpsgd(p, x, y, noise):
    s, n = per_example(p, x, y)
    return tmap(lambda a, z: (a + SIG * CLIP * z) / B14, s, noise), n


def dpsgd_dp(bug):
    def f(p, x, y, noise):
        s, n = per_example(p, x, y)
        if bug == "noise-before-psum":
            return tmap(lambda a, z: psum(a + SIG * CLIP * z, "dp") / B14, s, noise), n
        den = x.shape[0] if bug == "local-batch-divisor" else B14
        return tmap(lambda a, z: (psum(a, "dp") + SIG * CLIP * z) / den, s, noise), n
    return f


C.smap("s.dpsgd_per_example_clip_noise.dp4", {"dp": 4}, dpsgd_dp, (P(), P("dp"), P("dp"), P()), (P(), P("dp")),
       dpsgd, (P14, R(B14, 5, scale=2.0), I(0, 3, B14), mlp_params(5, 8, 3, s=1.0)),
       bugs=[("noise-before-psum", ["wrong-scale"]), ("local-batch-divisor", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. natural-gradient direction (TRPO style): the empirical Fisher-vector
#     product F v = mean_i g_i (g_i . v) + damping v from per-example
#     gradients of the flattened parameters (jax.vmap(jax.grad)), inside 5
#     conjugate-gradient steps in lax.fori_loop; rows over dp4, the per-row
#     products psum'd inside every matvec.
B15, DMP = 16, 0.1
P15 = mlp_params(4, 6, 3)
TH15, UNR15 = ravel_pytree(P15)


def row_loss(t, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(mlp(UNR15(t), x[None]), y[None])[0]


def natgrad(t, x, y):
    G = jax.vmap(jax.grad(row_loss), (None, 0, 0))(t, x, y)
    g = jnp.mean(G, 0)
    return cg(lambda v: G.T @ (G @ v) / B15 + DMP * v, g, 5)


def natgrad_dp(bug):
    def f(t, x, y):
        G = jax.vmap(jax.grad(row_loss), (None, 0, 0))(t, x, y)
        g = psum(jnp.sum(G, 0), "dp") / B15
        if bug == "fvp-local-rows":
            mv = lambda v: G.T @ (G @ v) / B15 + DMP * v
        elif bug == "damping-inside-psum":
            mv = lambda v: psum(G.T @ (G @ v) / B15 + DMP * v, "dp")
        else:
            mv = lambda v: psum(G.T @ (G @ v), "dp") / B15 + DMP * v
        return cg(mv, g, 5)
    return f


C.smap("s.natural_gradient_fisher_cg.dp4", {"dp": 4}, natgrad_dp, (P(), P("dp"), P("dp")), P(), natgrad,
       (TH15, R(B15, 4), I(0, 3, B15)),
       bugs=[("fvp-local-rows", ["missing-all-reduce"]), ("damping-inside-psum", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs (jax.jit with in / out shardings)
# 16. the jvp-of-grad HVP of 1. with the rows over dp8.
C.gspmd("g.hvp_jvp_of_grad_rows.dp8", {"dp": 8}, (P(), P(), P("dp"), P("dp")), P(), hvp_fwd_rev,
        (P1, V1, R(B1, D1), R(B1, O1)))

# 17. the Gauss-Newton-vector product of 3. with the hidden units over tp4
#     (parameters and tangent alike) and the rows over dp2.
SPEC17 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
C.gspmd("g.gauss_newton_vp_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC17, SPEC17, P("dp")), SPEC17, ggn,
        (P3, V3, R(B3, D3)))

# 18. the Poisson PINN loss of 5. and its gradient (jax.value_and_grad),
#     interior and boundary points over dp8.
C.gspmd("g.pinn_poisson_loss_grad.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), (P(), P()),
        jax.value_and_grad(lambda p, xi, xb: interior_loss(p, xi) + boundary_loss(p, xb)),
        (P5, rng.random((NI5, 2)).astype(np.float32), XB5))

# 19. the MAML meta step of 8. with the tasks over dp4.
C.gspmd("g.maml_meta_step_tasks.dp4", {"dp": 4}, (P(), P()) + (P("dp"),) * 4, (P(), P()), maml_step,
        (P8, S8, XS8, YS8, XQ8, YQ8))

# 20. the jax.hessian Newton step of 13. with the rows over dp8.
C.gspmd("g.newton_step_jax_hessian.dp8", {"dp": 8}, (P(), P("dp"), P("dp")), P(), newton,
        (R(D13, scale=0.3), R(N13, D13), (rng.random(N13) < 0.4).astype(np.float32)))

# 21. the WGAN-GP critic step of 11. with the batch and eps over dp4.
C.gspmd("g.wgan_gp_critic_step.dp4", {"dp": 4}, (P(), P(), P("dp"), P("dp"), P("dp")), (P(), P(), P()),
        wgan_step, (P11, S11, R(B11, D11), R(B11, D11, scale=1.5), rng.random(B11).astype(np.float32)))

C.finish()
