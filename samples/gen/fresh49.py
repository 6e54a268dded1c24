"""samples/fresh49: a 49th batch of programs as a user writes them, on the theme of probabilistic machine learning under sharding in current JAX (variational inference with the reparameterisation trick, the noise passed in as an input; Bayesian linear / logistic regression with ELBO terms over a dp-sharded minibatch; deep ensembles over an ensemble axis; Gaussian-process kernel matrices with rows sharded; normalizing-flow layers with log-det-Jacobian sums; mixture-density networks with the components over tp; importance-weighted bounds and Stein variational gradient descent; jax.grad training steps with optax), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. Bayesian linear regression by mean-field VI (dp8): weights
    mu + softplus(rho) * eps with S=4 noise draws eps passed in replicated,
    the expected Gaussian log-likelihood of the minibatch scaled by
    N_data / B_global, the closed-form KL to an N(0, 1/alpha) prior added as
    KL / n_dev on every device before one psum of the whole negative ELBO;
    value and gradient by jax.value_and_grad (check_vma=True). Bugs: KL not
    divided by the device count (counted 8 times), the likelihood scaled by
    N_data / B_local.
 2. a Bayesian logistic-regression training step (dp4 x tp2, features over
    tp): logits psum'd over tp, Bernoulli log-likelihood psum'd over dp and
    scaled by N_data / B, the KL of the tp shard's weights psum'd over tp
    only, optax.adam on (mu, log sigma) (check_vma=True). Bugs: KL psum'd
    over (dp, tp) (counted 4 times), the logits not psum'd over tp.
 3. a deep ensemble's predictive distribution (ens4 x dp2, one member per
    ens rank): member softmax probabilities pmean'd over ens, the ensemble
    NLL of the labels (mean over the batch by psum over dp), and the mutual
    information H[mean p] - mean H[p] per example. Bugs: members averaged
    over dp instead of ens, logits averaged before the softmax.
 4. deep-ensemble training (8 members over ens4, 2 per device, vmapped),
    bootstrap weights of all members passed replicated over ens and sliced
    at the rank's member offset, a weighted MSE per member whose sums are
    psum'd over dp, jax.grad and optax.adamw (check_vma=True). Bugs: the
    gradients pmean'd over ens (members averaged together), the bootstrap
    weights sliced at offset rank * 1 instead of rank * 2.
 5. an ARD RBF kernel matrix with its rows over sp4 (training inputs
    all_gather'd), jitter on the global diagonal (row offset from
    axis_index), and the quadratic form y^T K y psum'd. Bugs: jitter on
    the local diagonal, the quadratic form not psum'd.
 6. a GP posterior predictive (dp2 x tp4): test points over dp, training
    points, alpha = K^-1 y and the rows of the inverse Cholesky factor's
    transpose over tp; mean and v = K_*X L^-T psum'd over tp, the
    variance amp^2 - |v|^2 + noise, the test log predictive density psum'd
    over dp. Bugs: the variance from psum'd squares of the local partial v
    (sum of squares of partial sums), the mean not psum'd.
 7. RealNVP affine couplings (two layers, halves swapped), batch over dp2,
    the conditioner's hidden units over tp4 (s and t psum'd), tanh-bounded
    log-scales; per-example log-likelihood and mean NLL. Bugs: the log-det
    summed over the batch axis (axis 0; the local batch equals the half
    width, so the shapes agree), s not psum'd over tp.
 8. ActNorm + an affine coupling whose transformed half has its features
    over tp4 (batch over dp2): base log-density of the sharded half, the
    coupling's sum(s) and ActNorm's sum(logscale) psum'd over tp. Bugs:
    the coupling log-det left local (not psum'd over tp), ActNorm's
    log-det psum'd over (dp, tp).
 9. a mixture-density network's NLL (dp2 x tp4, 8 components, 2 per tp
    rank): mixing weights by a log-softmax over all components (pmax /
    psum log-sum-exp), the mixture by a second global log-sum-exp. Bugs:
    the mixture log-sum-exp over the local components only, the mixing
    log-softmax over the local components only, a local max as stabiliser
    with the exponentials psum'd (no common shift).
10. an MDN training step (dp2 x tp4, check_vma=True): jax.value_and_grad
    through the global log-sum-exp (stop_gradient'd pmax), loss pmean'd
    over dp, optax.adam. Bugs: the mixture exponentials pmean'd over tp
    (the loss off by log 4; the gradients unchanged), the loss psum'd over
    dp (loss and gradients twice as large). (A first draft pmean'd in both
    log-sum-exps, the mixing normaliser's too: the two log 4 cancel and the
    function is unchanged; replaced.)
11. a Bayesian MLP with the local reparameterisation trick (dp2 x tp4):
    activation noise eps passed in, the first layer column-parallel
    (activation mean x mu, variance x^2 sigma^2), the second row-parallel
    with mean and variance psum'd over tp; negative ELBO with the KL of
    both layers psum'd over tp. Bugs: standard deviations psum'd instead
    of variances, KL psum'd over (dp, tp).
12. an importance-weighted (IWAE) bound, K=8 importance samples over mc4 and
    the batch over dp2: a linear-Gaussian encoder / decoder, noise eps
    passed in, log weights log p(x|z) + log p(z) - log q(z|x), log-sum-exp
    over all samples (pmax / psum over mc) minus log K. Bugs: minus log of
    the local sample count, a per-device log-sum-exp pmean'd over mc (a
    looser bound).
13. one Stein variational gradient descent step, 16 particles over pt8: the
    particles and their scores (jax.grad of a Gaussian-mixture log density)
    all_gather'd, an RBF kernel whose bandwidth is the mean pairwise
    squared distance (psum'd over the local rows) / log(n+1), the driving
    and repulsive terms averaged over all n particles. Bugs: averaged over
    the local particle count, the bandwidth from the local rows only.
14. the held-out negative log predictive density of a Bayesian regression
    (test set over dp8, S posterior weight samples passed in): per-example
    log-sum-exp over the samples minus log S, and the mean written
    -psum(sum) / N (the negation before the division, where jnp.mean's
    baseline negates after it). Bugs: divided by the local count, pmean'd
    and then divided by the global count.
GSPMD pairs (jax.jit with in/out shardings): 15. the Bayesian logistic
training step of 2. (dp4 x tp2); 16. the MDN training step of 10.;
17. the RealNVP log-likelihood of 7.; 18. the ensemble predictive of 3.
over an ens axis; 19. the SVGD step of 13.; 20. the kernel matrix with
jitter of 5. with its rows over sp.
Left out, as idioms of earlier batches: an ensemble of MLPs vmapped over a
mesh axis under GSPMD alone (fresh4; here shard_map bodies with the member
offset and optax), continuous normalizing flows with an exact trace
(fresh35), noise drawn with jax.random inside the bodies (fresh10: here every
noise is an input).
Numerics: every correct pair agrees with its baseline at rounding level (f32);
every bug variant differs clearly (see "numerics").
Run from the repository root: bash samples/gen/run_fresh49.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh49.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh49.py"
C = Corpus("samples/fresh49", SCRIPT, "samples/gen/run_fresh49.sh", sys.argv[1:])
rng, R, I = seeded(4949)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index
LOG2PI = float(np.log(2 * np.pi))


def gauss_kl(mu, sig, prior_var):
    """KL(N(mu, sig^2) || N(0, prior_var)) summed over every element."""
    return 0.5 * jnp.sum((sig ** 2 + mu ** 2) / prior_var - 1.0 - 2.0 * jnp.log(sig) + np.log(prior_var))


# ---------------------------------------------------------------------------
# 1. Bayesian linear regression, mean-field VI, minibatch over dp8
N1, B1, D1, S1 = 1000, 32, 6, 4
BETA1, ALPHA1 = 4.0, 2.0


def blr_neg_elbo(q, x, y, eps):
    sig = jax.nn.softplus(q["rho"])
    w = q["mu"] + sig * eps  # (S, D)
    pred = x @ w.T  # (B, S)
    ll = 0.5 * np.log(BETA1 / (2 * np.pi)) - 0.5 * BETA1 * jnp.square(y[:, None] - pred)
    exp_ll = jnp.sum(jnp.mean(ll, 1))
    return -(N1 / B1) * exp_ll + gauss_kl(q["mu"], sig, 1.0 / ALPHA1)


def blr_ref(q, x, y, eps):
    return jax.value_and_grad(blr_neg_elbo)(q, x, y, eps)


def blr_sm(bug):
    def f(q, x, y, eps):
        ndev = lax.axis_size("dp")

        def neg_elbo(q):
            sig = jax.nn.softplus(q["rho"])
            w = q["mu"] + sig * eps
            r = y[:, None] - jnp.einsum("bd,sd->bs", x, w)
            ll = 0.5 * np.log(BETA1 / (2 * np.pi)) - 0.5 * BETA1 * r * r
            bsz = x.shape[0] if bug == "lik-scale-local-batch" else x.shape[0] * ndev
            kl = gauss_kl(q["mu"], sig, 1.0 / ALPHA1)
            kl_share = kl if bug == "kl-on-every-device" else kl / ndev
            return psum(-(N1 / bsz) * jnp.sum(ll.mean(1)) + kl_share, "dp")
        return jax.value_and_grad(neg_elbo)(q)
    return f


Q1 = {"mu": R(D1, scale=0.5), "rho": R(D1, scale=0.3) - 1.0}
W1TRUE = R(D1)
X1 = R(B1, D1)
ARGS1 = (Q1, X1, (X1 @ W1TRUE + 0.5 * R(B1)).astype(np.float32), R(S1, D1))
QS1 = {"mu": P(), "rho": P()}
C.smap("s.bayes_linreg_meanfield_elbo_grad.dp8", {"dp": 8}, blr_sm, (QS1, P("dp"), P("dp"), P()), (P(), QS1),
       blr_ref, ARGS1, bugs=[("kl-on-every-device", ["wrong-scale"]), ("lik-scale-local-batch", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 2. Bayesian logistic regression training step, dp4 x tp2, features over tp
N2, B2, D2, S2 = 5000, 16, 8, 3
OPT2 = optax.adam(3e-2)
PRIOR2 = 1.0


def blogreg_loss(q, x, y, eps):
    sig = jnp.exp(q["logsig"])
    w = q["mu"] + sig * eps  # (S, D)
    logits = jnp.dot(x, w.T)  # (B, S)
    ll = y[:, None] * logits - jax.nn.softplus(logits)
    return -(N2 / B2) * jnp.sum(jnp.mean(ll, 1)) + gauss_kl(q["mu"], sig, PRIOR2)


def blogreg_ref(q, s, x, y, eps):
    l, g = jax.value_and_grad(blogreg_loss)(q, x, y, eps)
    u, s = OPT2.update(g, s, q)
    return optax.apply_updates(q, u), s, l


def blogreg_sm(bug):
    def f(q, s, x, y, eps):
        def loss(q):
            sig = jnp.exp(q["logsig"])
            w = q["mu"] + sig * eps  # (S, D_local)
            part = jnp.einsum("bd,sd->bs", x, w)
            logits = (pmean if bug == "logits-pmean-over-tp" else psum)(part, "tp")
            ll = y[:, None] * logits - jax.nn.softplus(logits)
            local = -(N2 / B2) * jnp.sum(jnp.mean(ll, 1))
            kl = psum(gauss_kl(q["mu"], sig, PRIOR2), "tp")
            if bug == "kl-inside-dp-psum":
                return psum(local + kl, "dp")
            return psum(local, "dp") + kl
        l, g = jax.value_and_grad(loss)(q)
        u, s = OPT2.update(g, s, q)
        return optax.apply_updates(q, u), s, l
    return f


Q2 = {"mu": R(D2, scale=0.3), "logsig": R(D2, scale=0.2) - 1.5}
S2_ = OPT2.init(Q2)
SPEC2 = {"mu": P("tp"), "logsig": P("tp")}
SS2 = state_specs(S2_, SPEC2)
X2 = R(B2, D2)
Y2 = (X2 @ R(D2) + 0.3 * R(B2) > 0).astype(np.float32)
ARGS2 = (Q2, S2_, X2, Y2, R(S2, D2))
IN2 = (SPEC2, SS2, P("dp", "tp"), P("dp"), P(None, "tp"))
C.smap("s.bayes_logreg_adam_step_features_tp.dp4xtp2", {"dp": 4, "tp": 2}, blogreg_sm, IN2, (SPEC2, SS2, P()),
       blogreg_ref, ARGS2,
       bugs=[("kl-inside-dp-psum", ["wrong-scale"]), ("logits-pmean-over-tp", ["wrong-collective-op"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 3. deep-ensemble predictive distribution, ens4 x dp2
M3, B3, D3, H3, C3 = 4, 8, 6, 16, 5


def member_logits(w1, b1, w2, x):
    return jnp.tanh(x @ w1 + b1) @ w2


def entropy(p):
    return -jnp.sum(p * jnp.log(p + 1e-12), -1)


def ens_ref(w1, b1, w2, x, y):
    logits = jax.vmap(member_logits, (0, 0, 0, None))(w1, b1, w2, x)  # (M, B, C)
    probs = jax.nn.softmax(logits, -1)
    pbar = probs.mean(0)
    nll = -jnp.mean(jnp.log(jnp.take_along_axis(pbar, y[:, None], 1)[:, 0]))
    mi = entropy(pbar) - entropy(probs).mean(0)
    return pbar, nll, mi


def ens_sm(bug):
    def f(w1, b1, w2, x, y):
        logits = member_logits(w1[0], b1[0], w2[0], x)  # one member per ens rank
        if bug == "average-logits":
            pbar = jax.nn.softmax(pmean(logits, "ens"), -1)
            probs = jax.nn.softmax(logits, -1)
        else:
            probs = jax.nn.softmax(logits, -1)
            pbar = pmean(probs, "dp" if bug == "members-mean-over-dp" else "ens")
        picked = jnp.sum(pbar * jax.nn.one_hot(y, C3), -1)
        nll = -psum(jnp.sum(jnp.log(picked)), "dp") / B3
        mi = entropy(pbar) - pmean(entropy(probs), "ens")
        return pbar, nll, mi
    return f


ARGS3 = (R(M3, D3, H3, scale=0.6), R(M3, H3, scale=0.2), R(M3, H3, C3, scale=0.6), R(B3, D3), I(0, C3, B3))
C.smap("s.deep_ensemble_predictive_mutual_info.ens4xdp2", {"ens": 4, "dp": 2}, ens_sm,
       (P("ens"), P("ens"), P("ens"), P("dp"), P("dp")), (P("dp"), P(), P("dp")), ens_ref, ARGS3,
       bugs=[("members-mean-over-dp", ["wrong-collective-group"]), ("average-logits", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 4. deep-ensemble training with bootstrap weights, 8 members over ens4
M4, B4, D4, H4 = 8, 8, 5, 12
OPT4 = optax.adamw(1e-2, weight_decay=1e-2)


def reg_mlp(p, x):
    return (jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"])[:, 0]


def boot_loss(p, x, y, wt):
    return jnp.sum(wt * jnp.square(reg_mlp(p, x) - y)) / jnp.sum(wt)


def enstrain_ref(p, s, x, y, wts):
    ls, g = jax.vmap(jax.value_and_grad(boot_loss), (0, None, None, 0))(p, x, y, wts)
    u, s = OPT4.update(g, s, p)
    return optax.apply_updates(p, u), s, ls


def enstrain_sm(bug):
    def f(p, s, x, y, wts):
        ml = p["w1"].shape[0]
        off = idx("ens") * (1 if bug == "bootstrap-offset-one-per-rank" else ml)
        mine = lax.dynamic_slice_in_dim(wts, off, ml, 0)  # (ml, B_local)

        def member(pm, wm):
            num = psum(jnp.sum(wm * jnp.square(reg_mlp(pm, x) - y)), "dp")
            return num / psum(jnp.sum(wm), "dp")

        def total(p):
            ls = jax.vmap(member)(p, mine)
            return jnp.sum(ls), ls
        g, ls = jax.grad(total, has_aux=True)(p)
        if bug == "grads-pmean-over-ens":
            g = jax.tree.map(lambda a: pmean(a, "ens"), g)
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, ls
    return f


P4 = {"w1": R(M4, D4, H4, scale=0.5), "b1": R(M4, H4, scale=0.1), "w2": R(M4, H4, 1, scale=0.5)}
S4 = OPT4.init(P4)
SPEC4 = {"w1": P("ens"), "b1": P("ens"), "w2": P("ens")}
SS4 = state_specs(S4, SPEC4)
X4 = R(B4, D4)
WTS4 = rng.poisson(1.0, (M4, B4)).astype(np.float32) + 0.25  # bootstrap counts, never all zero
ARGS4 = (P4, S4, X4, np.sin(X4.sum(1)).astype(np.float32), WTS4)
C.smap("s.deep_ensemble_bootstrap_adamw_vmap_members.ens4xdp2", {"ens": 4, "dp": 2}, enstrain_sm,
       (SPEC4, SS4, P("dp"), P("dp"), P(None, "dp")), (SPEC4, SS4, P("ens")), enstrain_ref, ARGS4,
       bugs=[("grads-pmean-over-ens", ["wrong-collective-group"]), ("bootstrap-offset-one-per-rank", ["wrong-offset"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 5. ARD RBF kernel matrix, rows over sp4, jitter on the global diagonal
N5, D5 = 16, 3
JIT5 = 1e-2


def ard_rbf(a, b, amp, ell):
    d = (a[:, None, :] - b[None, :, :]) / ell
    return amp ** 2 * jnp.exp(-0.5 * jnp.sum(d * d, -1))


def kern_ref(x, y, amp, ell):
    k = ard_rbf(x, x, amp, ell) + JIT5 * jnp.eye(x.shape[0])
    return k, y @ k @ y


def kern_sm(bug):
    def f(x, y, amp, ell):
        xa = lax.all_gather(x, "sp", tiled=True)
        ya = lax.all_gather(y, "sp", tiled=True)
        nl = x.shape[0]
        k = ard_rbf(x, xa, amp, ell)
        r0 = 0 if bug == "jitter-local-diagonal" else idx("sp") * nl
        rows = r0 + jnp.arange(nl)
        k = k + JIT5 * (rows[:, None] == jnp.arange(xa.shape[0])[None, :])
        q = jnp.dot(y, k @ ya)
        return k, (q if bug == "quadform-not-psummed" else psum(q, "sp"))
    return f


ARGS5 = (R(N5, D5), R(N5), np.float32(1.3), np.array([0.8, 1.5, 2.0], np.float32))
C.smap("s.gp_ard_kernel_rows_jitter_quadform.sp4", {"sp": 4}, kern_sm, (P("sp"), P("sp"), P(), P()),
       (P("sp"), P()), kern_ref, ARGS5,
       bugs=[("jitter-local-diagonal", ["wrong-offset"]), ("quadform-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. GP posterior predictive, test points over dp2, training points over tp4
N6, M6, D6 = 16, 8, 3
AMP6, ELL6, NOISE6 = 1.1, 0.9, 0.05


def gp_pred_ref(xs, ys, x, alpha, linvT):
    ks = ard_rbf(xs, x, AMP6, ELL6)  # (M, N)
    mean = ks @ alpha
    v = ks @ linvT
    var = AMP6 ** 2 - jnp.sum(v * v, -1) + NOISE6
    lpd = jnp.sum(-0.5 * (LOG2PI + jnp.log(var) + (ys - mean) ** 2 / var))
    return mean, var, lpd


def gp_pred_sm(bug):
    def f(xs, ys, x, alpha, linvT):
        ks = ard_rbf(xs, x, AMP6, ELL6)  # (M_local, N_local)
        mp = ks @ alpha
        mean = mp if bug == "mean-not-psummed" else psum(mp, "tp")
        vp = ks @ linvT  # partial sums of K_*X L^-T over this rank's training points
        if bug == "variance-from-partial-v":
            sq = psum(jnp.sum(vp * vp, -1), "tp")
        else:
            v = psum(vp, "tp")
            sq = jnp.sum(v * v, -1)
        var = AMP6 ** 2 - sq + NOISE6
        lpd = psum(jnp.sum(-0.5 * (LOG2PI + jnp.log(var) + (ys - mean) ** 2 / var)), "dp")
        return mean, var, lpd
    return f


X6 = R(N6, D6)
K6 = np.asarray(ard_rbf(X6, X6, AMP6, ELL6), np.float64) + NOISE6 * np.eye(N6)
L6 = np.linalg.cholesky(K6)
Y6 = np.sin(X6.sum(1)).astype(np.float64)
XS6 = R(M6, D6)
ARGS6 = (XS6, np.sin(XS6.sum(1)).astype(np.float32), X6, np.linalg.solve(K6, Y6).astype(np.float32),
         np.linalg.inv(L6).T.astype(np.float32))
C.smap("s.gp_posterior_predictive_train_points_tp.dp2xtp4", {"dp": 2, "tp": 4}, gp_pred_sm,
       (P("dp"), P("dp"), P("tp"), P("tp"), P("tp", None)), (P("dp"), P("dp"), P()), gp_pred_ref, ARGS6,
       bugs=[("variance-from-partial-v", ["wrong-reduction"]), ("mean-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 7. RealNVP affine couplings, batch over dp2, conditioner hidden over tp4
D7, H7, B7 = 8, 16, 8


def coupling_ref(p, x):
    h = D7 // 2
    logdet = jnp.zeros(x.shape[0])
    for l in range(2):
        x1, x2 = x[:, :h], x[:, h:]
        a = jax.nn.relu(x1 @ p["w1"][l] + p["b1"][l])
        s = jnp.tanh(a @ p["ws"][l])
        t = a @ p["wt"][l]
        x2 = x2 * jnp.exp(s) + t
        logdet = logdet + jnp.sum(s, -1)
        x = jnp.concatenate([x2, x1], -1)  # swap halves
    return x, logdet


def realnvp_ref(p, x):
    z, logdet = coupling_ref(p, x)
    lp = -0.5 * jnp.sum(z * z, -1) - 0.5 * D7 * LOG2PI + logdet
    return lp, -jnp.mean(lp)


def realnvp_sm(bug):
    def f(p, x):
        h = D7 // 2
        logdet = jnp.zeros(x.shape[0])
        for l in range(2):
            x1, x2 = x[:, :h], x[:, h:]
            a = jax.nn.relu(x1 @ p["w1"][l] + p["b1"][l])  # hidden units over tp
            sp = a @ p["ws"][l]
            s = jnp.tanh(sp if bug == "s-not-psummed" else psum(sp, "tp"))
            t = psum(a @ p["wt"][l], "tp")
            x2 = x2 * jnp.exp(s) + t
            logdet = logdet + (jnp.sum(s, axis=0) if bug == "logdet-sum-batch-axis" else jnp.sum(s, axis=-1))
            x = jnp.concatenate([x2, x1], -1)
        lp = -0.5 * jnp.sum(x * x, -1) - 0.5 * D7 * LOG2PI + logdet
        return lp, -psum(jnp.sum(lp), "dp") / B7
    return f


P7 = {"w1": R(2, D7 // 2, H7, scale=0.5), "b1": R(2, H7, scale=0.1), "ws": R(2, H7, D7 // 2, scale=0.3),
      "wt": R(2, H7, D7 // 2, scale=0.3)}
SPEC7 = {"w1": P(None, None, "tp"), "b1": P(None, "tp"), "ws": P(None, "tp"), "wt": P(None, "tp")}
ARGS7 = (P7, R(B7, D7))
C.smap("s.realnvp_coupling_loglik_hidden_tp.dp2xtp4", {"dp": 2, "tp": 4}, realnvp_sm, (SPEC7, P("dp")),
       (P("dp"), P()), realnvp_ref, ARGS7,
       bugs=[("logdet-sum-batch-axis", ["wrong-axis"]), ("s-not-psummed", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 8. ActNorm + affine coupling, transformed half's features over tp4
D8A, D8B, H8, B8 = 4, 8, 8, 6


def actcoup_ref(p, x1, x2):
    y = (x2 - p["loc"]) * jnp.exp(p["logscale"])
    a = jnp.tanh(x1 @ p["w1"] + p["b1"])
    s = 0.5 * jnp.tanh(a @ p["ws"])
    z2 = y * jnp.exp(s) + a @ p["wt"]
    ld = jnp.sum(s, -1) + jnp.sum(p["logscale"])
    base = -0.5 * (jnp.sum(x1 * x1, -1) + jnp.sum(z2 * z2, -1)) - 0.5 * (D8A + D8B) * LOG2PI
    return z2, base + ld


def actcoup_sm(bug):
    def f(p, x1, x2):
        y = (x2 - p["loc"]) * jnp.exp(p["logscale"])
        a = jnp.tanh(x1 @ p["w1"] + p["b1"])  # replicated over tp
        s = 0.5 * jnp.tanh(a @ p["ws"])  # this rank's features
        z2 = y * jnp.exp(s) + a @ p["wt"]
        ld_c = jnp.sum(s, -1)
        ld_c = ld_c if bug == "coupling-logdet-local" else psum(ld_c, "tp")
        ld_a = psum(jnp.sum(p["logscale"]), ("dp", "tp") if bug == "actnorm-logdet-psum-dp-tp" else "tp")
        sq2 = psum(jnp.sum(z2 * z2, -1), "tp")
        base = -0.5 * (jnp.sum(x1 * x1, -1) + sq2) - 0.5 * (D8A + D8B) * LOG2PI
        return z2, base + ld_c + ld_a
    return f


P8 = {"loc": R(D8B, scale=0.2), "logscale": R(D8B, scale=0.3), "w1": R(D8A, H8, scale=0.5), "b1": R(H8, scale=0.1),
      "ws": R(H8, D8B, scale=0.5), "wt": R(H8, D8B, scale=0.5)}
SPEC8 = {"loc": P("tp"), "logscale": P("tp"), "w1": P(), "b1": P(), "ws": P(None, "tp"), "wt": P(None, "tp")}
ARGS8 = (P8, R(B8, D8A), R(B8, D8B))
C.smap("s.actnorm_coupling_features_tp_logdet.dp2xtp4", {"dp": 2, "tp": 4}, actcoup_sm,
       (SPEC8, P("dp"), P("dp", "tp")), (P("dp", "tp"), P("dp")), actcoup_ref, ARGS8,
       bugs=[("coupling-logdet-local", ["missing-all-reduce"]),
             ("actnorm-logdet-psum-dp-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 9. mixture-density network NLL, components over tp4
K9, DX9, H9, DY9, B9 = 8, 4, 16, 2, 8


def mdn_heads(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    logits = h @ p["wpi"]  # (B, K)
    mu = jnp.einsum("bh,hky->bky", h, p["wmu"])
    logsig = jnp.clip(jnp.einsum("bh,hky->bky", h, p["wsig"]), -3.0, 3.0)
    return logits, mu, logsig


def comp_logpdf(y, mu, logsig):
    z = (y[:, None, :] - mu) * jnp.exp(-logsig)
    return jnp.sum(-0.5 * z * z - logsig - 0.5 * LOG2PI, -1)  # (B, K)


def mdn_nll_ref(p, x, y):
    logits, mu, logsig = mdn_heads(p, x)
    logpi = jax.nn.log_softmax(logits, -1)
    nll = -jax.nn.logsumexp(logpi + comp_logpdf(y, mu, logsig), -1)
    return nll, jnp.mean(nll)


def lse_tp(a, axis="tp"):
    m = pmax(jnp.max(a, -1, keepdims=True), axis)
    return (m + jnp.log(psum(jnp.sum(jnp.exp(a - m), -1, keepdims=True), axis)))[..., 0]


def mdn_nll_sm(bug):
    def f(p, x, y):
        logits, mu, logsig = mdn_heads(p, x)  # this rank's components
        if bug == "pi-logsoftmax-local":
            logpi = jax.nn.log_softmax(logits, -1)
        else:
            logpi = logits - lse_tp(logits)[:, None]
        a = logpi + comp_logpdf(y, mu, logsig)
        if bug == "mixture-lse-local":
            lse = jax.nn.logsumexp(a, -1)
        elif bug == "local-max-stabiliser":
            m = jnp.max(a, -1, keepdims=True)
            lse = (m + jnp.log(psum(jnp.sum(jnp.exp(a - m), -1, keepdims=True), "tp")))[:, 0]
        else:
            lse = lse_tp(a)
        nll = -lse
        return nll, psum(jnp.sum(nll), "dp") / B9
    return f


P9 = {"w1": R(DX9, H9, scale=0.5), "b1": R(H9, scale=0.1), "wpi": R(H9, K9, scale=0.8),
      "wmu": R(H9, K9, DY9, scale=0.6), "wsig": R(H9, K9, DY9, scale=0.3)}
SPEC9 = {"w1": P(), "b1": P(), "wpi": P(None, "tp"), "wmu": P(None, "tp"), "wsig": P(None, "tp")}
ARGS9 = (P9, R(B9, DX9), R(B9, DY9))
C.smap("s.mdn_nll_components_tp_global_lse.dp2xtp4", {"dp": 2, "tp": 4}, mdn_nll_sm, (SPEC9, P("dp"), P("dp")),
       (P("dp"), P()), mdn_nll_ref, ARGS9,
       bugs=[("mixture-lse-local", ["missing-all-reduce"]), ("pi-logsoftmax-local", ["missing-all-reduce"]),
             ("local-max-stabiliser", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 10. MDN training step with optax.adam, check_vma=True
OPT10 = optax.adam(1e-2)


def mdn_train_ref(p, s, x, y):
    l, g = jax.value_and_grad(lambda p: mdn_nll_ref(p, x, y)[1])(p)
    u, s = OPT10.update(g, s, p)
    return optax.apply_updates(p, u), s, l


def mdn_train_sm(bug):
    def f(p, s, x, y):
        def glse(a, red=psum):
            m = pmax(lax.stop_gradient(jnp.max(a, -1, keepdims=True)), "tp")
            return (m + jnp.log(red(jnp.sum(jnp.exp(a - m), -1, keepdims=True), "tp")))[:, 0]

        def loss(p):
            logits, mu, logsig = mdn_heads(p, x)
            logpi = logits - glse(logits)[:, None]
            nll = -glse(logpi + comp_logpdf(y, mu, logsig), pmean if bug == "mixture-exp-pmean" else psum)
            return (psum if bug == "loss-psum-over-dp" else pmean)(jnp.mean(nll), "dp")
        l, g = jax.value_and_grad(loss)(p)
        u, s = OPT10.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return f


S10 = OPT10.init(P9)
SS10 = state_specs(S10, SPEC9)
ARGS10 = (P9, S10, R(B9, DX9), R(B9, DY9))
C.smap("s.mdn_adam_step_grad_through_global_lse.dp2xtp4", {"dp": 2, "tp": 4}, mdn_train_sm,
       (SPEC9, SS10, P("dp"), P("dp")), (SPEC9, SS10, P()), mdn_train_ref, ARGS10,
       bugs=[("mixture-exp-pmean", ["wrong-collective-op"]), ("loss-psum-over-dp", ["wrong-scale"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 11. Bayesian MLP with the local reparameterisation trick, dp2 x tp4
N11, B11, D11, H11, C11 = 2000, 8, 6, 16, 3
PRIOR11, NOISE11 = 0.5, 0.3


def lrt_ref(q, x, y, e1, e2):
    s1, s2 = jnp.exp(q["ls1"]), jnp.exp(q["ls2"])
    a = x @ q["m1"] + jnp.sqrt(jnp.square(x) @ jnp.square(s1)) * e1
    h = jax.nn.relu(a)
    out = h @ q["m2"] + jnp.sqrt(jnp.square(h) @ jnp.square(s2) + 1e-6) * e2
    ll = jnp.sum(-0.5 * jnp.square((y - out) / NOISE11) - np.log(NOISE11) - 0.5 * LOG2PI)
    kl = gauss_kl(q["m1"], s1, PRIOR11) + gauss_kl(q["m2"], s2, PRIOR11)
    return out, -(N11 / B11) * ll + kl


def lrt_sm(bug):
    def f(q, x, y, e1, e2):
        s1, s2 = jnp.exp(q["ls1"]), jnp.exp(q["ls2"])
        a = x @ q["m1"] + jnp.sqrt(jnp.square(x) @ jnp.square(s1)) * e1  # column-parallel
        h = jax.nn.relu(a)
        mean = psum(h @ q["m2"], "tp")
        if bug == "std-psummed":
            std = psum(jnp.sqrt(jnp.square(h) @ jnp.square(s2) + 1e-6 / 4), "tp")
        else:
            std = jnp.sqrt(psum(jnp.square(h) @ jnp.square(s2), "tp") + 1e-6)
        out = mean + std * e2
        ll = psum(jnp.sum(-0.5 * jnp.square((y - out) / NOISE11) - np.log(NOISE11) - 0.5 * LOG2PI), "dp")
        kl = gauss_kl(q["m1"], s1, PRIOR11) + gauss_kl(q["m2"], s2, PRIOR11)
        kl = psum(kl, ("dp", "tp") if bug == "kl-psum-over-dp-and-tp" else "tp")
        return out, -(N11 / B11) * ll + kl
    return f


Q11 = {"m1": R(D11, H11, scale=0.4), "ls1": R(D11, H11, scale=0.2) - 2.0,
       "m2": R(H11, C11, scale=0.4), "ls2": R(H11, C11, scale=0.2) - 2.0}
SPEC11 = {"m1": P(None, "tp"), "ls1": P(None, "tp"), "m2": P("tp"), "ls2": P("tp")}
ARGS11 = (Q11, R(B11, D11), R(B11, C11), R(B11, H11), R(B11, C11))
C.smap("s.bnn_local_reparam_colrow_parallel_elbo.dp2xtp4", {"dp": 2, "tp": 4}, lrt_sm,
       (SPEC11, P("dp"), P("dp"), P("dp", "tp"), P("dp")), (P("dp"), P()), lrt_ref, ARGS11,
       bugs=[("std-psummed", ["wrong-reduction"]), ("kl-psum-over-dp-and-tp", ["wrong-collective-group"])])

# ---------------------------------------------------------------------------
# 12. IWAE bound, K=8 importance samples over mc4, batch over dp2
K12, B12, DX12, DZ12 = 8, 4, 6, 3
NOISE12 = 0.5


def iw_logw(p, x, eps):
    """log importance weights (K, B) of a linear-Gaussian encoder / decoder."""
    mu = x @ p["em"]
    ls = jnp.clip(x @ p["es"], -2.0, 1.0)
    z = mu + jnp.exp(ls) * eps  # (K, B, Dz)
    logq = jnp.sum(-0.5 * eps * eps - ls - 0.5 * LOG2PI, -1)
    logpz = jnp.sum(-0.5 * z * z - 0.5 * LOG2PI, -1)
    r = (x - z @ p["dec"]) / NOISE12
    logpx = jnp.sum(-0.5 * r * r - np.log(NOISE12) - 0.5 * LOG2PI, -1)
    return logpx + logpz - logq


def iwae_ref(p, x, eps):
    lw = iw_logw(p, x, eps)
    bound = jax.nn.logsumexp(lw, 0) - np.log(K12)
    return bound, jnp.mean(bound)


def iwae_sm(bug):
    def f(p, x, eps):
        lw = iw_logw(p, x, eps)  # (K_local, B_local)
        kl = eps.shape[0]
        if bug == "per-device-lse-pmean":
            bound = pmean(jax.nn.logsumexp(lw, 0) - np.log(kl), "mc")
        else:
            m = pmax(jnp.max(lw, 0), "mc")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(lw - m), 0), "mc"))
            kk = kl if bug == "log-k-local" else kl * lax.axis_size("mc")
            bound = lse - np.log(float(kk))
        return bound, pmean(jnp.mean(bound), "dp")
    return f


P12 = {"em": R(DX12, DZ12, scale=0.4), "es": R(DX12, DZ12, scale=0.2), "dec": R(DZ12, DX12, scale=0.6)}
ARGS12 = (P12, R(B12, DX12), R(K12, B12, DZ12))
C.smap("s.iwae_bound_samples_mc_global_lse.mc4xdp2", {"mc": 4, "dp": 2}, iwae_sm, (P(), P("dp"), P("mc", "dp")),
       (P("dp"), P()), iwae_ref, ARGS12,
       bugs=[("log-k-local", ["constant-mismatch"]), ("per-device-lse-pmean", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 13. one SVGD step, 16 particles over pt8
N13, D13 = 16, 2
MIX_MU = np.array([[-1.5, 0.0], [1.5, 0.5]], np.float32)
STEP13 = 0.2


def logp_mix(x):
    comps = -0.5 * jnp.sum(jnp.square(x[None, :] - MIX_MU), -1)
    return jax.nn.logsumexp(comps) - np.log(2.0)


def svgd_ref(x):
    sc = jax.vmap(jax.grad(logp_mix))(x)
    diff = x[:, None, :] - x[None, :, :]  # x_i - x_j
    d2 = jnp.sum(diff * diff, -1)
    h = jnp.mean(d2) / np.log(N13 + 1.0)
    k = jnp.exp(-d2 / h)
    phi = (k @ sc + jnp.sum((2.0 / h) * diff * k[..., None], 1)) / N13
    return x + STEP13 * phi, h


def svgd_sm(bug):
    def f(x):
        sc = jax.vmap(jax.grad(logp_mix))(x)
        xa = lax.all_gather(x, "pt", tiled=True)
        sa = lax.all_gather(sc, "pt", tiled=True)
        diff = x[:, None, :] - xa[None, :, :]
        d2 = jnp.sum(diff * diff, -1)  # (n_local, n)
        tot = jnp.sum(d2) if bug == "bandwidth-local-rows" else psum(jnp.sum(d2), "pt")
        rows = x.shape[0] if bug == "bandwidth-local-rows" else xa.shape[0]
        h = tot / (rows * xa.shape[0]) / np.log(N13 + 1.0)
        k = jnp.exp(-d2 / h)
        n = x.shape[0] if bug == "mean-over-local-particles" else xa.shape[0]
        phi = (k @ sa + jnp.sum((2.0 / h) * diff * k[..., None], 1)) / n
        return x + STEP13 * phi, h
    return f


ARGS13 = (R(N13, D13, scale=1.5),)
C.smap("s.svgd_step_particles_allgather_bandwidth.pt8", {"pt": 8}, svgd_sm, (P("pt"),), (P("pt"), P()), svgd_ref,
       ARGS13, bugs=[("mean-over-local-particles", ["wrong-scale"]), ("bandwidth-local-rows", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 14. held-out negative log predictive density of a Bayesian regression,
#     test set over dp8, S posterior weight samples passed in replicated
N14, D14, S14 = 16, 4, 6
NOISE14 = 0.4


def lpd_terms(x, y, ws):
    pred = x @ ws.T  # (N, S)
    ll = -0.5 * jnp.square((y[:, None] - pred) / NOISE14) - np.log(NOISE14) - 0.5 * LOG2PI
    return jax.nn.logsumexp(ll, 1) - np.log(S14)


def nlpd_ref(x, y, ws):
    lpd = lpd_terms(x, y, ws)
    return lpd, -jnp.mean(lpd)


def nlpd_sm(bug):
    def f(x, y, ws):
        lpd = lpd_terms(x, y, ws)
        if bug == "pmean-then-global-count":
            return lpd, -pmean(jnp.sum(lpd), "dp") / N14
        n = x.shape[0] if bug == "divided-by-local-count" else N14
        return lpd, -psum(jnp.sum(lpd), "dp") / n
    return f


ARGS14 = (R(N14, D14), R(N14), R(S14, D14, scale=0.5))
C.smap("s.heldout_nlpd_posterior_samples_neg_psum.dp8", {"dp": 8}, nlpd_sm, (P("dp"), P("dp"), P()), (P("dp"), P()),
       nlpd_ref, ARGS14, bugs=[("divided-by-local-count", ["wrong-scale"]), ("pmean-then-global-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# GSPMD pairs
C.gspmd("g.bayes_logreg_adam_step.dp4xtp2", {"dp": 4, "tp": 2}, IN2, (SPEC2, SS2, P()), blogreg_ref, ARGS2)
C.gspmd("g.mdn_adam_step_components_tp.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC9, SS10, P("dp"), P("dp")),
        (SPEC9, SS10, P()), mdn_train_ref, ARGS10)
C.gspmd("g.realnvp_coupling_loglik.dp2xtp4", {"dp": 2, "tp": 4}, (SPEC7, P("dp")), (P("dp"), P()), realnvp_ref,
        ARGS7)
C.gspmd("g.deep_ensemble_predictive.ens4xdp2", {"ens": 4, "dp": 2}, (P("ens"), P("ens"), P("ens"), P("dp"), P("dp")),
        (P("dp"), P(), P("dp")), ens_ref, ARGS3)
C.gspmd("g.svgd_step_particles.pt8", {"pt": 8}, (P("pt"),), (P("pt"), P()), svgd_ref, ARGS13)
C.gspmd("g.gp_ard_kernel_rows_jitter.sp4", {"sp": 4}, (P("sp"), P("sp"), P(), P()), (P("sp"), P()), kern_ref, ARGS5)

C.finish()
