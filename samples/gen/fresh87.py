"""samples/fresh87: an 87th batch of programs as a user writes them, on the theme of adversarial robustness and certified training under sharding in current JAX / optax (PGD and FGSM attacks inside the training step, TRADES, interval bound propagation through tensor-parallel layers, CROWN-style linear bounds, randomized smoothing with the noise passed in, spectral normalisation by power iteration on a sharded weight, Lipschitz margin losses), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. FGSM adversarial training step, batch over dp8: the input gradient of
    the global-mean cross-entropy by jax.grad of the local loss (per-example,
    no collective), x + eps sign(g), the parameter gradient of the
    adversarial loss pmean'd over dp, optax.sgd with momentum.
    Bugs: parameter gradients not pmean'd, the loss's mean over the
    adversarial batch replaced by a clean-batch loss (the attack skipped).
 2. PGD L-inf attack with the input features over tp4 (first layer
    row-parallel, pre-activations psum'd), backward written by hand,
    3 steps in a fori_loop with a random start passed in, projection onto
    the eps box. Bugs: pre-activation not psum'd, the box radius divided by
    the tp size (a per-shard budget).
 3. universal adversarial perturbation (one delta shared by the batch),
    batch over dp4: the delta's gradient psum'd over dp, then a sign step
    and clipping. Bugs: the sign taken of the local gradient before the
    psum (psum of signs), the gradient never reduced.
 4. PGD L2 attack on a dp2 x tp4 mesh (batch over dp, features over tp):
    the step normalised and the delta projected with per-example L2 norms
    whose squares are psum'd over tp. Bugs: the projection with the local
    feature shard's norm, the step's norm psum'd over dp as well.
 5. the TRADES objective with the classes over tp4 and the batch over dp2:
    vocab-parallel log-softmax (pmax of the max, psum of the exponentials)
    for clean and adversarial logits, CE + beta KL(p_clean || p_adv),
    global batch mean. Bugs: the adversarial log-sum-exp local, the mean
    over the local batch (no pmean over dp).
 6. interval bound propagation through a column-parallel then a
    row-parallel layer (tp4) in centre/radius form: |W| applied to the
    radius, partial bounds psum'd, then the worst-case logits and the IBP
    cross-entropy. Bugs: W instead of |W| for the second layer's radius,
    the radius not psum'd, the bias added on every shard before the psum.
 7. CROWN-style back-substitution for a 2-layer MLP with the hidden units
    over tp4: IBP pre-activation bounds, adaptive ReLU relaxation, the
    specification matrix C (true minus other classes) pushed back to the
    input, the input coefficient psum'd before its L1 norm. Bugs: the L1
    norm of each local partial coefficient psum'd (|sum| vs sum |.|), the
    bias term of the relaxation not psum'd.
 8. randomized smoothing with the noise passed in: batch over dp2, noise
    samples over sp4; per-sample argmax, vote counts psum'd over sp, the
    top class, the certified radius sigma Phi^-1(p_A) and the certified
    accuracy over the global batch. Bugs: vote counts from the local
    samples only, certified accuracy divided by the local batch size.
 9. spectral normalisation by power iteration on a weight whose rows are
    over tp4: v = W^T u psum'd, u = W v on the shard, its norm from a psum
    of squares, sigma = u^T W v psum'd, W / sigma. Bugs: u normalised by its
    local norm, sigma not psum'd.
10. a Lipschitz-margin (Tsuzuku-style) loss on dp2 x tp4: the spectral norms
    of two weights (rows over tp) by one power-iteration step each, the
    network's Lipschitz bound their product, non-target logits raised by
    sqrt(2) eps L, cross-entropy over the dp-sharded batch. Bugs: the
    second layer's sigma from the local shard, loss mean without pmean.
11. interval bound propagation with the batch over dp8 as a certified
    training step (jax.grad of a kappa-mixed clean / IBP loss, pmean'd
    grads, optax.adam). Bugs: mixing weight applied to the wrong term,
    gradients psum'd instead of pmean'd.
12. spectral normalisation with W's blocks over r2 x c4 (2 power
    steps): the norm of v psum'd over c, of u over r, sigma over both.
    Bugs: v's norm psum'd over r (wrong axis), sigma psum'd over r only.
13. FGSM against a Megatron MLP (hidden over tp4): the input gradient's
    partials reduced by psum_scatter + all_gather before the sign step.
    Bugs: the sign taken on the local partial gradient before the psum,
    eps multiplied by the tp size.
14. PGD L-inf by jax.grad through a Megatron MLP inside the body
    (check_vma=True), batch over dp2, hidden over tp4, steps by lax.scan
    from a random start passed in. Bugs: the random start dropped, step
    size and radius swapped.
15. a TRADES training step in bf16 compute with f32 master weights, batch
    over dp4 on a dp4 x tp2 mesh: one sign step on the KL from x + noise
    (passed in), CE + beta KL gradients pmean'd over dp, optax.adamw.
    Bugs: gradients pmean'd over tp instead of dp, the reported loss the
    clean CE only.
23. randomized-smoothing votes with the noise samples over sp8: per-sample
    predictions all_gather'd along the samples and counted on every
    device. Bugs: gathered along the batch, the counts psum'd once more.
24. L2 step and projection with the features over two mesh axes
    (sp2 x tp4), norms psum'd over the axis pair, then clipping to [0, 1].
    Bugs: the norm psum'd over tp only, the clip before the projection.
25. IBP margin bounds lo[y] - hi[j] with the output layer's partial
    bounds psum_scatter'd over the classes and all_gather'd (tp4), the
    bias sliced at the rank's class offset. Bugs: bias sliced at offset 0,
    the margin from the centre instead of the lower bound.
26. spectral normalisation in a lax.fori_loop with u replicated and W's
    columns over tp4. Bugs: v normalised by its local norm, sigma
    pmean'd instead of psum'd.
GSPMD pairs (jax.jit with in/out shardings): 16. a PGD L-inf training step
(3 steps, optax.adamw) with the batch over dp and the hidden units over tp;
17. IBP bounds of a 3-layer MLP with the weights over tp; 18. spectral
normalisation by 4 power-iteration steps with the weight's columns over tp8;
19. randomized-smoothing vote counts with the batch over dp and the noise
samples over sp; 20. the TRADES loss and its parameter gradient with the
batch over dp8; 21. the CROWN lower bounds of 7. with the batch over dp2 and
the hidden units over tp4; 22. the Lipschitz-margin loss of 10. and its
gradient in both weights (rows over tp, batch over dp).
Numerics: every correct pair agrees with its baseline at rounding level
(f32 within 1e-6; the bf16 TRADES step 15. within 3e-4); every bug variant
differs clearly (see "numerics"). Sign steps are taken on gradients far
from zero on these inputs, so rounding does not flip a sign.
Several correct bodies are written differently from their baselines on
purpose (a hand-written softmax backward against jax.grad, a sum loss
against a mean loss before a sign, einsum paths chosen from local shapes),
which the checker may leave unverified.
Run from the repository root: bash samples/gen/run_fresh87.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh87.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

SCRIPT = "samples/gen/fresh87.py"
C = Corpus("samples/fresh87", SCRIPT, "samples/gen/run_fresh87.sh", sys.argv[1:])
rng, R, I = seeded(8787)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index

B, D, H, K = 16, 16, 12, 6


def mlp(p, x):
    return jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def ce(lg, y):
    return optax.softmax_cross_entropy_with_integer_labels(lg, y)


def params(d=D, h=H, k=K):
    return {"w1": R(d, h, scale=0.4), "b1": R(h, scale=0.1), "w2": R(h, k, scale=0.4), "b2": R(k, scale=0.1)}


PSPEC_REP = {"w1": P(), "b1": P(), "w2": P(), "b2": P()}

# ---------------------------------------------------------------------------
# 1. FGSM adversarial training step, batch over dp8.
EPS1, OPT1 = 0.1, optax.sgd(0.05, momentum=0.9)


def fgsm_ref(p, s, x, y):
    gx = jax.grad(lambda x: jnp.mean(ce(mlp(p, x), y)))(x)
    xa = x + EPS1 * jnp.sign(gx)
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(mlp(p, xa), y)))(p)
    u, s = OPT1.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def fgsm_body(bug):
    def f(p, s, x, y):
        gx = jax.grad(lambda x: jnp.sum(ce(mlp(p, x), y)) / B)(x)
        xa = x if bug == "attack-skipped" else x + EPS1 * jnp.sign(gx)
        l, g = jax.value_and_grad(lambda p: jnp.mean(ce(mlp(p, xa), y)))(p)
        if bug != "grads-not-pmeaned":
            g = pmean(g, "dp")
        l = pmean(l, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


P1 = params()
S1 = OPT1.init(P1)
SS1 = jax.tree.map(lambda _: P(), S1)
C.smap("s.fgsm_train_step_sgd_momentum.dp8", {"dp": 8}, fgsm_body, (PSPEC_REP, SS1, P("dp"), P("dp")),
       (PSPEC_REP, SS1, P()), fgsm_ref, (P1, jax.tree.map(lambda a: a + 0.01, S1), R(B, D), I(0, K, B)),
       bugs=[("grads-not-pmeaned", ["missing-collective"]), ("attack-skipped", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 2. PGD L-inf, features over tp4, hand-written backward, random start.
EPS2, ALPHA2, STEPS2 = 0.08, 0.03, 3


def pgd_linf_ref(p, x, y, d0):
    def step(_, d):
        g = jax.grad(lambda d: jnp.sum(ce(mlp(p, x + d), y)))(d)
        return jnp.clip(d + ALPHA2 * jnp.sign(g), -EPS2, EPS2)
    d = lax.fori_loop(0, STEPS2, step, jnp.clip(d0, -EPS2, EPS2))
    return x + d, jnp.mean(ce(mlp(p, x + d), y))


def pgd_linf_body(bug):
    eps = EPS2 / 4 if bug == "radius-per-shard" else EPS2

    def fwd(p, xl):
        h = xl @ p["w1"]
        if bug != "preact-not-psummed":
            h = psum(h, "tp")
        h = h + p["b1"]
        return jax.nn.relu(h) @ p["w2"] + p["b2"], h

    def f(p, x, y, d0):
        def step(_, d):
            lg, h = fwd(p, x + d)
            dlg = jax.nn.softmax(lg) - jax.nn.one_hot(y, K)
            dh = (dlg @ p["w2"].T) * (h > 0)
            g = dh @ p["w1"].T
            return jnp.minimum(jnp.maximum(d + ALPHA2 * jnp.sign(g), -eps), eps)
        d = lax.fori_loop(0, STEPS2, step, jnp.clip(d0, -eps, eps))
        lg, _ = fwd(p, x + d)
        return x + d, jnp.mean(ce(lg, y))
    return f


C.smap("s.pgd_linf_features_over_tp_manual_backward.tp4", {"tp": 4}, pgd_linf_body,
       ({"w1": P("tp"), "b1": P(), "w2": P(), "b2": P()}, P(None, "tp"), P(), P(None, "tp")),
       (P(None, "tp"), P()), pgd_linf_ref, (params(), R(B, D), I(0, K, B), R(B, D, scale=0.05)),
       bugs=[("preact-not-psummed", ["missing-collective"]), ("radius-per-shard", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 3. universal adversarial perturbation, batch over dp4.
EPS3, ALPHA3 = 0.1, 0.02


def uap_ref(p, x, y, d):
    for _ in range(2):
        g = jax.grad(lambda d: jnp.mean(ce(mlp(p, x + d[None]), y)))(d)
        d = jnp.clip(d + ALPHA3 * jnp.sign(g), -EPS3, EPS3)
    return d


def uap_body(bug):
    def f(p, x, y, d):
        for _ in range(2):
            g = jax.grad(lambda d: jnp.sum(ce(mlp(p, x + d[None]), y)))(d)
            if bug == "sign-before-psum":
                s = psum(jnp.sign(g), "dp")
            elif bug == "grad-not-reduced":
                s = g
            else:
                s = psum(g, "dp")
            d = jnp.clip(d + ALPHA3 * jnp.sign(s), -EPS3, EPS3)
        return d
    return f


C.smap("s.universal_perturbation_sign_of_global_grad.dp4", {"dp": 4}, uap_body,
       (PSPEC_REP, P("dp"), P("dp"), P()), P(), uap_ref, (params(), R(B, D), I(0, K, B), R(D, scale=0.03)),
       bugs=[("sign-before-psum", ["wrong-order"]), ("grad-not-reduced", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 4. PGD L2 on dp2 x tp4: batch over dp, features over tp.
EPS4, ALPHA4 = 0.5, 0.2
D4 = 32


def l2n(v):
    return jnp.sqrt(jnp.sum(v * v, -1, keepdims=True) + 1e-12)


def pgd_l2_ref(w, x, y, d):
    for _ in range(2):
        g = jax.grad(lambda d: jnp.sum(ce(jnp.tanh(x + d) @ w, y)))(d)
        d = d + ALPHA4 * g / l2n(g)
        d = d * jnp.minimum(1.0, EPS4 / l2n(d))
    return d


def pgd_l2_body(bug):
    def gnorm(v, axes):
        return jnp.sqrt(psum(jnp.sum(v * v, -1, keepdims=True), axes) + 1e-12)

    def f(w, x, y, d):
        for _ in range(2):
            # gradient by hand: d/dd of ce(sum_tp ...) = (softmax - onehot) w^T * tanh'
            z = jnp.tanh(x + d)
            lg = psum(z @ w, "tp")
            g = ((jax.nn.softmax(lg) - jax.nn.one_hot(y, K)) @ w.T) * (1 - z * z)
            d = d + ALPHA4 * g / gnorm(g, ("dp", "tp") if bug == "step-norm-over-dp-too" else "tp")
            nd = l2n(d) if bug == "local-norm-projection" else gnorm(d, "tp")
            d = d * jnp.minimum(1.0, EPS4 / nd)
        return d
    return f


C.smap("s.pgd_l2_projection_global_feature_norm.dp2xtp4", {"dp": 2, "tp": 4}, pgd_l2_body,
       (P("tp"), P("dp", "tp"), P("dp"), P("dp", "tp")), P("dp", "tp"), pgd_l2_ref,
       (R(D4, K, scale=0.5), R(B, D4), I(0, K, B), R(B, D4, scale=0.05)),
       bugs=[("local-norm-projection", ["missing-collective"]), ("step-norm-over-dp-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. TRADES objective, classes over tp4, batch over dp2.
BETA5, K5 = 6.0, 16


def trades_ref(lc, la, y):
    lpc, lpa = jax.nn.log_softmax(lc), jax.nn.log_softmax(la)
    kl = jnp.sum(jnp.exp(lpc) * (lpc - lpa), -1)
    nll = -jnp.take_along_axis(lpc, y[:, None], 1)[:, 0]
    return jnp.mean(nll + BETA5 * kl)


def trades_body(bug):
    def lsm(l, local=False):
        m = lax.stop_gradient(jnp.max(l, -1, keepdims=True))
        if local:
            return l - m - jnp.log(jnp.sum(jnp.exp(l - m), -1, keepdims=True))
        m = pmax(m, "tp")
        return l - m - jnp.log(psum(jnp.sum(jnp.exp(l - m), -1, keepdims=True), "tp"))

    def f(lc, la, y):
        kl_ = lc.shape[-1]
        lpc, lpa = lsm(lc), lsm(la, local=bug == "adv-lse-local")
        kl = psum(jnp.sum(jnp.exp(lpc) * (lpc - lpa), -1), "tp")
        loc = y - idx("tp") * kl_
        hit = (loc >= 0) & (loc < kl_)
        pick = jnp.take_along_axis(lpc, jnp.clip(loc, 0, kl_ - 1)[:, None], 1)[:, 0]
        nll = -psum(jnp.where(hit, pick, 0.0), "tp")
        m = jnp.mean(nll + BETA5 * kl)
        return m if bug == "mean-local-batch" else pmean(m, "dp")
    return f


C.smap("s.trades_vocab_parallel_kl.dp2xtp4", {"dp": 2, "tp": 4}, trades_body,
       (P("dp", "tp"), P("dp", "tp"), P("dp")), P(), trades_ref,
       (R(B, K5, scale=2.0), R(B, K5, scale=2.0), I(0, K5, B)),
       bugs=[("adv-lse-local", ["missing-collective"]), ("mean-local-batch", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 6. IBP through column- then row-parallel layers (tp4), centre/radius form.
EPS6, H6 = 0.1, 16


def ibp_ref(p, x, y):
    mu, r = x @ p["w1"] + p["b1"], EPS6 * jnp.sum(jnp.abs(p["w1"]), 0)
    lo, hi = jax.nn.relu(mu - r), jax.nn.relu(mu + r)
    mu, r = (hi + lo) / 2, (hi - lo) / 2
    mu, r = mu @ p["w2"] + p["b2"], r @ jnp.abs(p["w2"])
    lo, hi = mu - r, mu + r
    worst = jnp.where(jax.nn.one_hot(y, K, dtype=bool), lo, hi)
    return lo, hi, jnp.mean(ce(worst, y))


def ibp_body(bug):
    def f(p, x, y):
        mu = jnp.einsum("bd,dh->bh", x, p["w1"]) + p["b1"]
        r = EPS6 * jnp.abs(p["w1"]).sum(0)
        lo, hi = jax.nn.relu(mu - r), jax.nn.relu(mu + r)
        c, rad = 0.5 * (hi + lo), 0.5 * (hi - lo)
        w2a = p["w2"] if bug == "signed-w-for-radius" else jnp.abs(p["w2"])
        mu2 = c @ p["w2"]
        if bug == "bias-on-every-shard":
            mu2 = psum(mu2 + p["b2"], "tp")
        else:
            mu2 = psum(mu2, "tp") + p["b2"]
        r2 = rad @ w2a
        if bug != "radius-not-psummed":
            r2 = psum(r2, "tp")
        lo, hi = mu2 - r2, mu2 + r2
        worst = jnp.where(jax.nn.one_hot(y, K, dtype=bool), lo, hi)
        return lo, hi, jnp.mean(ce(worst, y))
    return f


C.smap("s.ibp_centre_radius_column_row_parallel.tp4", {"tp": 4}, ibp_body,
       ({"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}, P(), P()), (P(), P(), P()), ibp_ref,
       (params(h=H6), R(B, D), I(0, K, B)),
       bugs=[("signed-w-for-radius", ["wrong-value"]), ("radius-not-psummed", ["missing-collective"]),
             ("bias-on-every-shard", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. CROWN-style linear bounds for a 2-layer MLP, hidden over tp4.
EPS7, B7, H7 = 0.05, 4, 16


def crown_core(w1, b1, w2, b2, x, y, red):
    """Lower bounds of logit[y] - logit[j] for all j over the L-inf ball;
    red sums a hidden-dim partial over devices (identity on one device)."""
    mu, r = x @ w1 + b1, EPS7 * jnp.sum(jnp.abs(w1), 0)
    l, u = mu - r, mu + r
    unstable = (l < 0) & (u > 0)
    up_s = jnp.where(u <= 0, 0.0, jnp.where(l >= 0, 1.0, u / jnp.where(unstable, u - l, 1.0)))
    up_b = jnp.where(unstable, -l * up_s, 0.0)
    lo_s = jnp.where(u <= 0, 0.0, jnp.where(l >= 0, 1.0, (u > -l).astype(x.dtype)))
    Cm = jax.nn.one_hot(y, K)[:, None, :] - jnp.eye(K)[None]  # (b, k, K)
    lam = jnp.einsum("bkc,hc->bkh", Cm, w2)  # (b, k, h)
    slope = jnp.where(lam >= 0, lo_s[:, None], up_s[:, None])
    bias = jnp.where(lam >= 0, 0.0, up_b[:, None])
    A = lam * slope  # coefficient on pre-activations
    const = red(jnp.sum(A * b1, -1) + jnp.sum(lam * bias, -1))
    Ax = jnp.einsum("bkh,dh->bkd", A, w1)
    return A, Ax, const + jnp.einsum("bkc,c->bk", Cm, b2)


def crown_ref(w1, b1, w2, b2, x, y):
    _, Ax, const = crown_core(w1, b1, w2, b2, x, y, lambda t: t)
    return const + jnp.einsum("bkd,bd->bk", Ax, x) - EPS7 * jnp.sum(jnp.abs(Ax), -1)


def crown_body(bug):
    def f(w1, b1, w2, b2, x, y):
        if bug == "bias-term-not-psummed":
            red = lambda t: t  # noqa: E731
        else:
            red = lambda t: psum(t, "tp")  # noqa: E731
        _, Ax, const = crown_core(w1, b1, w2, b2, x, y, red)
        if bug == "l1-before-psum":
            l1 = psum(jnp.sum(jnp.abs(Ax), -1), "tp")
            Ax = psum(Ax, "tp")
        else:
            Ax = psum(Ax, "tp")
            l1 = jnp.sum(jnp.abs(Ax), -1)
        return const + jnp.einsum("bkd,bd->bk", Ax, x) - EPS7 * l1
    return f


C.smap("s.crown_backsubstitution_hidden_over_tp.tp4", {"tp": 4}, crown_body,
       (P(None, "tp"), P("tp"), P("tp"), P(), P(), P()), P(), crown_ref,
       (R(D, H7, scale=0.4), R(H7, scale=0.1), R(H7, K, scale=0.4), R(K, scale=0.1), R(B7, D), I(0, K, B7)),
       bugs=[("l1-before-psum", ["wrong-order"]), ("bias-term-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 8. randomized smoothing: batch over dp2, noise samples over sp4.
SIG8, S8, B8, K8 = 0.5, 32, 8, 4


def smooth_ref(w, x, noise):
    lg = jnp.einsum("bsd,dk->bsk", x[:, None] + SIG8 * noise, w)
    counts = jnp.sum(jax.nn.one_hot(jnp.argmax(lg, -1), K8), 1)
    top = jnp.argmax(counts, -1)
    pa = jnp.clip(jnp.max(counts, -1) / S8, 0.5, 0.99)
    rad = SIG8 * jax.scipy.special.ndtri(pa)
    acc = jnp.mean((rad > 0.2).astype(jnp.float32))
    return top, rad, acc


def smooth_body(bug):
    def f(w, x, noise):
        lg = jnp.einsum("bsd,dk->bsk", x[:, None] + SIG8 * noise, w)
        votes = jax.nn.one_hot(jnp.argmax(lg, -1), K8).sum(1)
        if bug == "local-votes":
            votes = votes * 4
        else:
            votes = psum(votes, "sp")
        top = jnp.argmax(votes, -1)
        pa = jnp.clip(jnp.max(votes, -1) / S8, 0.5, 0.99)
        rad = SIG8 * jax.scipy.special.ndtri(pa)
        n = psum(jnp.sum((rad > 0.2).astype(jnp.float32)), "dp")
        acc = n / (x.shape[0] if bug == "acc-over-local-batch" else B8)
        return top, rad, acc
    return f


C.smap("s.randomized_smoothing_votes_samples_over_sp.dp2xsp4", {"dp": 2, "sp": 4}, smooth_body,
       (P(), P("dp"), P("dp", "sp")), (P("dp"), P("dp"), P()), smooth_ref,
       (R(D, K8, scale=0.5), R(B8, D), R(B8, S8, D)),
       bugs=[("local-votes", ["missing-collective"]), ("acc-over-local-batch", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. spectral normalisation by power iteration, rows of W over tp4.
O9, I9 = 32, 16


def specnorm_ref(w, u):
    for _ in range(3):
        v = w.T @ u
        v = v / jnp.linalg.norm(v)
        u = w @ v
        u = u / jnp.linalg.norm(u)
    sigma = u @ w @ v
    return w / sigma, u, sigma


def specnorm_body(bug):
    def f(w, u):
        for _ in range(3):
            v = psum(jnp.dot(u, w), "tp")
            v = v * lax.rsqrt(jnp.sum(v * v))
            u = jnp.dot(w, v)
            ss = jnp.sum(u * u)
            if bug != "u-local-norm":
                ss = psum(ss, "tp")
            u = u * lax.rsqrt(ss)
        sigma = jnp.dot(u, jnp.dot(w, v))
        if bug != "sigma-not-psummed":
            sigma = psum(sigma, "tp")
        return w / sigma, u, sigma
    return f


C.smap("s.spectral_norm_power_iteration_rows_over_tp.tp4", {"tp": 4}, specnorm_body, (P("tp"), P("tp")),
       (P("tp"), P("tp"), P()), specnorm_ref, (R(O9, I9), R(O9)),
       bugs=[("u-local-norm", ["missing-collective"]), ("sigma-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 10. Lipschitz-margin loss on dp2 x tp4.
EPS10, H10 = 0.1, 16


def lmt_body(bug):
    def sig(w, u, local=False):
        v = psum(u @ w, "tp")
        v = v / jnp.sqrt(jnp.sum(v ** 2))
        wv = w @ v
        n2 = jnp.sum(wv ** 2)
        return jnp.sqrt(n2 if local else psum(n2, "tp"))

    def f(w1, w2, u1, u2, x, y):
        L = sig(w1, u1) * sig(w2, u2, local=bug == "sigma2-local-shard")
        # w1 rows (hidden) over tp: hidden sharded; w2 rows (classes) over tp too -> gather w2
        h = jax.nn.relu(x @ w1.T)  # (b, h/tp)
        w2f = lax.all_gather(w2, "tp", axis=0, tiled=True)  # (K, H)
        hf = lax.all_gather(h, "tp", axis=1, tiled=True)
        lg = hf @ w2f.T + np.sqrt(2.0) * EPS10 * L * (1 - jax.nn.one_hot(y, K10))
        m = jnp.mean(ce(lg, y))
        return (m if bug == "mean-not-pmeaned" else pmean(m, "dp")), L
    return f


K10 = K8 * 2


def lmt_ref_k(w1, w2, u1, u2, x, y):
    def sig(w, u):
        v = w.T @ u
        v = v / jnp.linalg.norm(v)
        return jnp.linalg.norm(w @ v)
    L = sig(w1, u1) * sig(w2, u2)
    lg = jax.nn.relu(x @ w1.T) @ w2.T
    lg = lg + np.sqrt(2.0) * EPS10 * L * (1 - jax.nn.one_hot(y, K10))
    return jnp.mean(ce(lg, y)), L


C.smap("s.lipschitz_margin_loss_power_iter.dp2xtp4", {"dp": 2, "tp": 4}, lmt_body,
       (P("tp"), P("tp"), P("tp"), P("tp"), P("dp"), P("dp")), (P(), P()),
       lmt_ref_k, (R(H10, D, scale=0.3), R(K10, H10, scale=0.3), R(H10), R(K10), R(B, D), I(0, K10, B)),
       bugs=[("sigma2-local-shard", ["missing-collective"]), ("mean-not-pmeaned", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 11. IBP certified training step, batch over dp8, optax.adam.
KAPPA11, EPS11, OPT11 = 0.7, 0.05, optax.adam(1e-2)


def ibp_worst(p, x, y):
    mu, r = x @ p["w1"] + p["b1"], EPS11 * jnp.sum(jnp.abs(p["w1"]), 0)
    lo, hi = jax.nn.relu(mu - r), jax.nn.relu(mu + r)
    mu, r = (hi + lo) / 2 @ p["w2"] + p["b2"], (hi - lo) / 2 @ jnp.abs(p["w2"])
    return jnp.where(jax.nn.one_hot(y, K, dtype=bool), mu - r, mu + r)


def cert_loss(p, x, y, kappa=KAPPA11):
    return jnp.mean(kappa * ce(mlp(p, x), y) + (1 - kappa) * ce(ibp_worst(p, x, y), y))


def cert_ref(p, s, x, y):
    l, g = jax.value_and_grad(cert_loss)(p, x, y)
    u, s = OPT11.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def cert_body(bug):
    def f(p, s, x, y):
        if bug == "kappa-swapped":
            lf = lambda p: jnp.mean((1 - KAPPA11) * ce(mlp(p, x), y) + KAPPA11 * ce(ibp_worst(p, x, y), y))  # noqa
        else:
            lf = lambda p: cert_loss(p, x, y)  # noqa: E731
        l, g = jax.value_and_grad(lf)(p)
        g = jax.tree.map(lambda t: psum(t, "dp"), g) if bug == "grads-psummed" else pmean(g, "dp")
        u, s = OPT11.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


P11 = params()
S11 = OPT11.init(P11)
SS11 = jax.tree.map(lambda _: P(), S11)
C.smap("s.ibp_certified_train_step_adam.dp8", {"dp": 8}, cert_body, (PSPEC_REP, SS11, P("dp"), P("dp")),
       (PSPEC_REP, SS11, P()), cert_ref, (P11, S11, R(B, D), I(0, K, B)),
       bugs=[("kappa-swapped", ["wrong-value"]), ("grads-psummed", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 16. PGD L-inf training step with adamw, batch over dp, hidden over tp.
OPT12 = optax.adamw(1e-2, weight_decay=0.01)


def pgd_train(p, s, x, y):
    d = jnp.zeros_like(x)
    for _ in range(3):
        g = jax.grad(lambda d: jnp.mean(ce(mlp(p, x + d), y)))(d)
        d = jnp.clip(d + 0.02 * jnp.sign(g), -0.05, 0.05)
    xa = lax.stop_gradient(x + d)
    l, g = jax.value_and_grad(lambda p: jnp.mean(ce(mlp(p, xa), y)))(p)
    u, s = OPT12.update(g, s, p)
    return optax.apply_updates(p, u), s, l


P12 = params(h=16)
S12 = OPT12.init(P12)
SP12 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}
SS12 = (optax.ScaleByAdamState(P(), SP12, SP12), optax.EmptyState(), optax.EmptyState())
C.gspmd("g.pgd_linf_train_step_adamw.dp2xtp4", {"dp": 2, "tp": 4}, (SP12, SS12, P("dp"), P("dp")),
        (SP12, SS12, P()), pgd_train, (P12, S12, R(B, D), I(0, K, B)))

# 17. IBP bounds of a 3-layer MLP with the weights over tp.


def ibp3(ws, bs, x):
    c, r = x, jnp.full_like(x, 0.05)
    for i, (w, b) in enumerate(zip(ws, bs)):
        c, r = c @ w + b, r @ jnp.abs(w)
        if i < len(ws) - 1:
            lo, hi = jax.nn.relu(c - r), jax.nn.relu(c + r)
            c, r = (lo + hi) / 2, (hi - lo) / 2
    return c - r, c + r


WS13 = [R(D, 16, scale=0.3), R(16, 16, scale=0.3), R(16, 8, scale=0.3)]
BS13 = [R(16, scale=0.1), R(16, scale=0.1), R(8, scale=0.1)]
C.gspmd("g.ibp_three_layer_bounds.tp8", {"tp": 8},
        ([P(None, "tp"), P("tp", None), P(None, "tp")], [P("tp"), P(), P("tp")], P()), (P(), P()),
        ibp3, (WS13, BS13, R(B, D)))

# 18. spectral normalisation by 4 power-iteration steps, columns over tp8.


def sn4(w, u):
    for _ in range(4):
        v = w.T @ u
        v = v / jnp.linalg.norm(v)
        u = w @ v
        u = u / jnp.linalg.norm(u)
    return w / (u @ w @ v), u, v


C.gspmd("g.spectral_norm_four_steps_cols.tp8", {"tp": 8}, (P(None, "tp"), P()), (P(None, "tp"), P(), P("tp")),
        sn4, (R(16, 32), R(16)))

# 19. randomized smoothing vote counts, batch over dp, samples over sp.
C.gspmd("g.randomized_smoothing_votes.dp2xsp4", {"dp": 2, "sp": 4}, (P(), P("dp"), P("dp", "sp")),
        (P("dp"), P("dp"), P()), smooth_ref, (R(D, K8, scale=0.5), R(B8, D), R(B8, S8, D)))

# 20. TRADES loss and its parameter gradient, batch over dp8.


def trades_grad(p, x, xa, y):
    def loss(p):
        return trades_ref(mlp(p, x), mlp(p, xa), y)
    return jax.value_and_grad(loss)(p)


X16 = R(B, D)
C.gspmd("g.trades_loss_param_grad.dp8", {"dp": 8}, (PSPEC_REP, P("dp"), P("dp"), P("dp")), (P(), PSPEC_REP),
        trades_grad, (params(k=K5), X16, X16 + R(B, D, scale=0.05), I(0, K5, B)))

# ---------------------------------------------------------------------------
# 12. spectral normalisation with W's blocks over a 2-D mesh r2 x c4 (rows
#     over r, columns over c): v = W^T u partial over r, its norm over c;
#     u = W v partial over c, its norm over r; sigma psum'd over both.
O17, I17 = 16, 32


def sn2d_ref(w, u):
    for _ in range(2):
        v = jnp.einsum("oi,o->i", w, u)
        v = v / jnp.sqrt(jnp.sum(v * v))
        u = jnp.einsum("oi,i->o", w, v)
        u = u / jnp.sqrt(jnp.sum(u * u))
    return jnp.einsum("o,oi,i->", u, w, v), u, v


def sn2d_body(bug):
    def f(w, u):
        for _ in range(2):
            v = psum(jnp.einsum("oi,o->i", w, u), "r")
            vn = psum(jnp.sum(v * v), "r" if bug == "v-norm-over-wrong-axis" else "c")
            v = v / jnp.sqrt(vn)
            u = psum(jnp.einsum("oi,i->o", w, v), "c")
            u = u / jnp.sqrt(psum(jnp.sum(u * u), "r"))
        sig = jnp.einsum("o,oi,i->", u, w, v)
        sig = psum(sig, "r") if bug == "sigma-psum-rows-only" else psum(sig, ("r", "c"))
        return sig, u, v
    return f


C.smap("s.spectral_norm_2d_blocks.r2xc4", {"r": 2, "c": 4}, sn2d_body, (P("r", "c"), P("r")), (P(), P("r"), P("c")),
       sn2d_ref, (R(O17, I17), R(O17)),
       bugs=[("v-norm-over-wrong-axis", ["wrong-axis"]), ("sigma-psum-rows-only", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 13. FGSM against a Megatron MLP (hidden over tp4, column- then
#     row-parallel): input gradient by hand, its partials over the hidden
#     shards reduced by psum_scatter over the features and all_gather'd,
#     then the sign step; the adversarial logits.
EPS18, H18 = 0.1, 16


def fgsm_tp_ref(p, x, y):
    g = jax.grad(lambda x: jnp.sum(ce(mlp(p, x), y)))(x)
    return mlp(p, x + EPS18 * jnp.sign(g))


def fgsm_tp_body(bug):
    def fwd(p, x):
        h = jnp.dot(x, p["w1"]) + p["b1"]
        return psum(jnp.dot(jax.nn.relu(h), p["w2"]), "tp") + p["b2"], h

    def f(p, x, y):
        lg, h = fwd(p, x)
        dlg = jax.nn.softmax(lg, axis=-1) - jax.nn.one_hot(y, K)
        dh = jnp.dot(dlg, p["w2"].T) * (h > 0).astype(x.dtype)
        gpart = jnp.dot(dh, p["w1"].T)  # partial over the hidden shards
        if bug == "sign-before-psum":
            step = psum(jnp.sign(gpart), "tp")
        else:
            g = lax.psum_scatter(gpart, "tp", scatter_dimension=1, tiled=True)
            g = lax.all_gather(g, "tp", axis=1, tiled=True)
            step = jnp.sign(g)
        eps = EPS18 * (4 if bug == "eps-times-tp" else 1)
        return fwd(p, x + eps * step)[0]
    return f


C.smap("s.fgsm_megatron_mlp_reduce_scatter_grad.tp4", {"tp": 4}, fgsm_tp_body,
       ({"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}, P(), P()), P(), fgsm_tp_ref,
       (params(h=H18), R(B, D), I(0, K, B)),
       bugs=[("sign-before-psum", ["wrong-order"]), ("eps-times-tp", ["wrong-scale"])])

# 21. GSPMD: the CROWN lower bounds of 7. with the hidden units over tp4
#     and the batch over dp2.
C.gspmd("g.crown_bounds_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4},
        (P(None, "tp"), P("tp"), P("tp"), P(), P("dp"), P("dp")), P("dp"), crown_ref,
        (R(D, H7, scale=0.4), R(H7, scale=0.1), R(H7, K, scale=0.4), R(K, scale=0.1), R(8, D), I(0, K, 8)))

# 22. GSPMD: the Lipschitz-margin loss of 10. and its gradient in both
#     weights, rows over tp, batch over dp.
C.gspmd("g.lipschitz_margin_loss_grad.dp2xtp4", {"dp": 2, "tp": 4},
        (P("tp"), P("tp"), P(), P(), P("dp"), P("dp")), (P(), (P("tp"), P("tp"))),
        lambda w1, w2, u1, u2, x, y: jax.value_and_grad(lambda w1, w2: lmt_ref_k(w1, w2, u1, u2, x, y)[0], (0, 1))(w1, w2),
        (R(H10, D, scale=0.3), R(K10, H10, scale=0.3), R(H10), R(K10), R(B, D), I(0, K10, B)))

# ---------------------------------------------------------------------------
# 14. PGD L-inf by jax.grad through the Megatron MLP inside the body
#     (check_vma=True: the row-parallel psum's transpose reduces the input
#     gradient), batch over dp2, hidden over tp4, steps by lax.scan from a
#     random start passed in; returns the adversarial inputs and the
#     adversarial loss pmean'd over dp.
EPS21, ALPHA21 = 0.06, 0.025


def pgd_scan_ref(p, x, y, d0):
    def step(d, _):
        g = jax.grad(lambda d: jnp.mean(ce(mlp(p, x + d), y)))(d)
        return jnp.clip(d + ALPHA21 * jnp.sign(g), -EPS21, EPS21), None
    d, _ = lax.scan(step, jnp.clip(d0, -EPS21, EPS21), None, length=3)
    return x + d, jnp.mean(ce(mlp(p, x + d), y))


def pgd_scan_body(bug):
    def net(p, x):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return psum(h @ p["w2"], "tp") + p["b2"]

    def f(p, x, y, d0):
        start = jnp.zeros_like(d0) if bug == "random-start-dropped" else d0
        lo, hi = (-ALPHA21, ALPHA21) if bug == "alpha-eps-swapped" else (-EPS21, EPS21)
        a = EPS21 if bug == "alpha-eps-swapped" else ALPHA21

        def step(d, _):
            g = jax.grad(lambda d: jnp.mean(ce(net(p, x + d), y)))(d)
            return jnp.clip(d + a * jnp.sign(g), lo, hi), None
        d, _ = lax.scan(step, jnp.clip(start, lo, hi), None, length=3)
        return x + d, pmean(jnp.mean(ce(net(p, x + d), y)), "dp")
    return f


C.smap("s.pgd_linf_scan_grad_through_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, pgd_scan_body,
       ({"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp"), "b2": P()}, P("dp"), P("dp"), P("dp")), (P("dp"), P()),
       pgd_scan_ref, (params(h=16), R(B, D), I(0, K, B), R(B, D, scale=0.05)), check_vma=True,
       bugs=[("random-start-dropped", ["wrong-value"]), ("alpha-eps-swapped", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 15. TRADES inner maximisation plus outer step in bf16 compute with f32
#     master weights, batch over dp4 (mesh dp4 x tp2 with tp unused by the
#     data, parameters replicated): one sign step on KL(p_clean || p_adv)
#     from x + noise (passed in), then CE + beta KL gradients pmean'd over
#     dp, optax.adamw.
OPT22 = optax.adamw(3e-3, weight_decay=1e-2)


def mlp16(p, x):
    q = jax.tree.map(lambda t: t.astype(jnp.bfloat16), p)
    return mlp(q, x.astype(jnp.bfloat16)).astype(jnp.float32)


def trades_kl(lc, la):
    lpc, lpa = jax.nn.log_softmax(lc), jax.nn.log_softmax(la)
    return jnp.sum(jnp.exp(lpc) * (lpc - lpa), -1)


def trades_step_loss(p, x, xa, y):
    lc = mlp16(p, x)
    return jnp.mean(ce(lc, y) + BETA5 * trades_kl(lc, mlp16(p, xa)))


def trades_step_ref(p, s, x, y, z):
    lc = lax.stop_gradient(mlp16(p, x))
    g = jax.grad(lambda xa: jnp.sum(trades_kl(lc, mlp16(p, xa))))(x + 0.01 * z)
    xa = jnp.clip(x + 0.01 * z + 0.05 * jnp.sign(g), x - 0.05, x + 0.05)
    l, gp = jax.value_and_grad(trades_step_loss)(p, x, xa, y)
    u, s = OPT22.update(gp, s, p)
    return optax.apply_updates(p, u), s, l


def trades_step_body(bug):
    def f(p, s, x, y, z):
        lc = lax.stop_gradient(mlp16(p, x))
        x0 = x + 0.01 * z
        g = jax.grad(lambda xa: jnp.sum(trades_kl(lc, mlp16(p, xa))))(x0)
        xa = jnp.clip(x0 + 0.05 * jnp.sign(g), x - 0.05, x + 0.05)
        l, gp = jax.value_and_grad(trades_step_loss)(p, x, xa, y)
        gp = pmean(gp, "tp" if bug == "grads-pmean-over-tp" else "dp")
        if bug == "loss-kl-clean-only":
            l = jnp.mean(ce(mlp16(p, x), y))
        u, s = OPT22.update(gp, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


P22 = params(k=K5)
S22 = OPT22.init(P22)
SS22 = jax.tree.map(lambda _: P(), S22)
C.smap("s.trades_step_bf16_compute_adamw.dp4xtp2", {"dp": 4, "tp": 2}, trades_step_body,
       (PSPEC_REP, SS22, P("dp"), P("dp"), P("dp")), (PSPEC_REP, SS22, P()), trades_step_ref,
       (P22, S22, R(B, D), I(0, K5, B), R(B, D)),
       bugs=[("grads-pmean-over-tp", ["wrong-axis"]), ("loss-kl-clean-only", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 23. randomized smoothing with the noise samples over sp8: each device's
#     per-sample predictions all_gather'd along the samples, the votes then
#     counted on every device (no psum), the top class and its count.
SIG23, S23 = 0.4, 32


def vote_ref(w, x, noise):
    pred = jnp.argmax(jnp.einsum("bsd,dk->bsk", x[:, None] + SIG23 * noise, w), -1)
    counts = jnp.stack([jnp.sum(pred == c, 1) for c in range(K8)], -1)
    return jnp.argmax(counts, -1), jnp.max(counts, -1)


def vote_body(bug):
    def f(w, x, noise):
        pred = jnp.argmax(jnp.einsum("bsd,dk->bsk", x[:, None] + SIG23 * noise, w), -1)
        if bug == "gathered-along-batch":
            allp = lax.all_gather(pred, "sp", axis=0, tiled=True)[:x.shape[0]]
        else:
            allp = lax.all_gather(pred, "sp", axis=1, tiled=True)
        counts = jnp.stack([jnp.sum(allp == c, 1) for c in range(K8)], -1)
        if bug == "counts-psummed-again":
            counts = psum(counts, "sp")
        return jnp.argmax(counts, -1), jnp.max(counts, -1)
    return f


C.smap("s.smoothing_votes_all_gather_predictions.sp8", {"sp": 8}, vote_body, (P(), P(), P(None, "sp")), (P(), P()),
       vote_ref, (R(D, K8, scale=0.5), R(8, D), R(8, S23, D)),
       bugs=[("gathered-along-batch", ["wrong-axis"]), ("counts-psummed-again", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 24. PGD L2 projection with the features over two mesh axes (sp2 x tp4):
#     the per-example norm's squares psum'd over the axis pair.
EPS24 = 0.3


def l2proj_ref(x, d, g):
    d = d + 0.1 * g / jnp.linalg.norm(g, axis=-1, keepdims=True)
    n = jnp.linalg.norm(d, axis=-1, keepdims=True)
    return jnp.clip(x + d * jnp.minimum(1.0, EPS24 / n), 0.0, 1.0)


def l2proj_body(bug):
    def f(x, d, g):
        ax = ("sp", "tp")
        gn = jnp.sqrt(psum(jnp.sum(g * g, -1, keepdims=True), ax))
        d = d + 0.1 * g / gn
        sq = jnp.sum(d * d, -1, keepdims=True)
        n = jnp.sqrt(psum(sq, "tp" if bug == "norm-over-tp-only" else ax))
        scale = jnp.minimum(1.0, EPS24 / n)
        if bug == "clip-before-projection":
            return jnp.clip(x + d, 0.0, 1.0) * scale
        return jnp.clip(x + d * scale, 0.0, 1.0)
    return f


C.smap("s.l2_projection_features_over_two_axes.sp2xtp4", {"sp": 2, "tp": 4}, l2proj_body,
       (P(None, ("sp", "tp")),) * 3, P(None, ("sp", "tp")), l2proj_ref,
       (0.5 + 0.2 * R(8, 32), R(8, 32, scale=0.1), R(8, 32)),
       bugs=[("norm-over-tp-only", ["wrong-axis"]), ("clip-before-projection", ["wrong-order"])])

# ---------------------------------------------------------------------------
# 25. IBP through a row-parallel output layer whose partial bounds are
#     reduce-scattered over the classes (psum_scatter) and all_gather'd
#     back; the hidden layer column-parallel; the margin lower bounds
#     lo[y] - hi[j]. tp4, 8 classes.
K25 = 8


def ibp_margin_ref(w1, b1, w2, b2, x, y):
    mu, r = x @ w1 + b1, 0.05 * jnp.sum(jnp.abs(w1), 0)
    lo, hi = jax.nn.relu(mu - r), jax.nn.relu(mu + r)
    c, rad = (lo + hi) / 2 @ w2 + b2, (hi - lo) / 2 @ jnp.abs(w2)
    lo, hi = c - rad, c + rad
    return jnp.take_along_axis(lo, y[:, None], 1) - hi


def ibp_margin_body(bug):
    def f(w1, b1, w2, b2, x, y):
        mu, r = x @ w1 + b1, 0.05 * jnp.sum(jnp.abs(w1), 0)
        lo, hi = jax.nn.relu(mu - r), jax.nn.relu(mu + r)
        part_c = (lo + hi) / 2 @ w2
        part_r = (hi - lo) / 2 @ jnp.abs(w2)
        c = lax.psum_scatter(part_c, "tp", scatter_dimension=1, tiled=True)
        rad = lax.psum_scatter(part_r, "tp", scatter_dimension=1, tiled=True)
        kq = c.shape[1]
        bias = b2 if bug == "bias-unsliced" else lax.dynamic_slice_in_dim(b2, idx("tp") * kq, kq)
        if bug == "bias-unsliced":
            bias = bias[:kq]
        lo_, hi_ = c + bias - rad, c + bias + rad
        lo, hi = (lax.all_gather(t, "tp", axis=1, tiled=True) for t in (lo_, hi_))
        if bug == "margin-uses-centre":
            return jnp.take_along_axis((lo + hi) / 2, y[:, None], 1) - hi
        return jnp.take_along_axis(lo, y[:, None], 1) - hi
    return f


C.smap("s.ibp_margin_reduce_scatter_classes.tp4", {"tp": 4}, ibp_margin_body,
       (P(None, "tp"), P("tp"), P("tp"), P(), P(), P()), P(), ibp_margin_ref,
       (R(D, 16, scale=0.4), R(16, scale=0.1), R(16, K25, scale=0.4), R(K25), R(B, D), I(0, K25, B)),
       bugs=[("bias-unsliced", ["wrong-offset"]), ("margin-uses-centre", ["wrong-value"])])

# ---------------------------------------------------------------------------
# 26. spectral normalisation in a lax.fori_loop with u replicated and the
#     columns of W over tp4 (v sharded): the loop carries (u, v_local); v's
#     norm from a psum, u = W v psum'd; returns W / sigma and u.


def sn_loop_ref(w, u):
    def body(_, uv):
        u, _ = uv
        v = w.T @ u
        v = v / jnp.linalg.norm(v)
        u = w @ v
        return u / jnp.linalg.norm(u), v
    u, v = lax.fori_loop(0, 4, body, (u, jnp.zeros(w.shape[1])))
    return w / (u @ (w @ v)), u


def sn_loop_body(bug):
    def f(w, u):
        def body(_, uv):
            u, _ = uv
            v = w.T @ u
            nv = jnp.sum(v * v) if bug == "v-norm-local" else psum(jnp.sum(v * v), "tp")
            v = v / jnp.sqrt(nv)
            u = psum(w @ v, "tp")
            return u / jnp.linalg.norm(u), v
        u, v = lax.fori_loop(0, 4, body, (u, jnp.zeros(w.shape[1])))
        sig = psum(u @ (w @ v), "tp")
        if bug == "sigma-pmean":
            sig = pmean(u @ (w @ v), "tp")
        return w / sig, u
    return f


C.smap("s.spectral_norm_fori_loop_cols_over_tp.tp4", {"tp": 4}, sn_loop_body, (P(None, "tp"), P()),
       (P(None, "tp"), P()), sn_loop_ref, (R(12, 32), R(12)),
       bugs=[("v-norm-local", ["missing-collective"]), ("sigma-pmean", ["wrong-scale"])])

C.finish()
