"""samples/fresh60: a 60th batch of programs as a user writes them, on the theme of population-based and ensemble methods under sharding in current JAX (evolution strategies with antithetic noise and the population over devices, fitness shaping by global ranks or z-scores, CMA-ES mean / path / covariance updates from a sharded population, BatchEnsemble training with the members over one mesh axis and the data over another, model soups, population-based training's exploit / explore step, snapshot-ensemble predictions under tensor parallelism, bootstrapped DQN heads), none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
shard_map families:
 1. OpenAI-ES with antithetic pairs, the half-population's noise over pop8
    (2 directions per device), fitness of theta +- sigma eps a linear
    regression's negative MSE on replicated data, centered ranks over the
    whole population of 2N (all_gather'd fitnesses, argsort of argsort, the
    device's slice at its offset in each half), the estimate
    sum (u+ - u-) eps / (2 N sigma) psum'd and an optax.adam step on its
    negative. Bugs: ranks within the shard, the estimate not psum'd, the
    antithetic partner evaluated at theta + sigma eps (sign not flipped).
 2. NES on a pop4 x dp2 mesh with the noise regenerated on device from a
    key (jax.random.fold_in of the member's global id, the shared-seed
    trick), each member's fitness a psum over dp of its data half, the
    fitnesses z-scored over the population (all_gather over pop), the
    estimate psum'd over pop, a plain SGD step written with a lax.fori_loop
    over the local members. Bugs: fitness not summed over dp, z-scores from
    the shard's members, fold_in of the local member index.
 3. CMA-ES (rank-mu and rank-one updates) with lambda = 16 candidates over
    pop4: y = z A^T, x = m + sigma y, the fitness a scaled sphere, global
    ranks from all_gather'd fitnesses, recombination weights looked up by
    rank, the weighted sums for the mean shift, the evolution path p_c and
    the rank-mu covariance psum'd. Bugs: weights looked up by local rank,
    rank-mu term not psum'd, the mean shift pmean'd (divided by 4).
 4. a BatchEnsemble training step on ens2 x dp4: a shared first-layer
    weight and per-member fast weights r, s (4 members, 2 per ens rank), the
    batch over dp shared by all members (vmap over the local members),
    jax.grad of the local loss, the shared weight's gradient psum'd over
    (ens, dp) and the fast weights' over dp only, then optax.adam applied
    shard-wise. Bugs: shared gradient not summed over ens, fast weights'
    gradients summed over ens too (members mixed).
 5. a greedy-prefix model soup on ens4 x dp2: 8 members (2 per ens rank) of
    a small MLP, validation data over dp (losses psum'd over dp), members
    ranked globally by validation loss, the soups of the k best for
    k = 1..8 as psum over ens of rank-masked sums / k, each soup evaluated
    on the validation data, the best k's soup returned with all soup
    losses. Bugs: ranks within the shard, the soup psum'd over dp instead
    of ens (wrong axis), the soup's weights divided by the local count.
 6. PBT exploit / explore, one member per device on pop8: truncation
    selection (members of rank 0 and 1 by score copy the members of rank 7
    and 6), the source's weights, momentum and learning rate fetched from
    all_gather'd copies at the source's index (a first draft's psum of
    one-hot masked copies was wrong: each device wants a different source,
    so the psum mixes them; its numerics showed it), the learning rate perturbed by 1.2 or
    0.8 from a coin passed in. Bugs: copy from rank 5 - r (wrong member),
    the own learning rate perturbed (not the source's), scores ranked
    ascending the wrong way (the best copy the worst).
 7. elitism in a population of 8 members over pop4 (2 per device): each
    member takes an SGD step on its own minibatch, then the best member
    after the step (argmax of all_gather'd scores) is broadcast into the
    slot of the worst by an all_gather of the stacked parameters and an
    index. Bugs: best found within the shard (local argmax), the worst slot
    taken at the local index (no device offset).
 8. snapshot-ensemble predictions of 4 snapshots of an MLP with the
    hidden dim over tp4 and the batch over dp2: row-parallel logits
    psum'd over tp, softmax per snapshot, probabilities averaged over the
    snapshots, the ensemble NLL psum'd over dp. Bugs: softmax of the
    partial logits before the psum, logits averaged before the softmax,
    NLL averaged by pmean over tp as well as dp (dp-scaled).
 9. bootstrapped double DQN with 8 heads over head4 and the batch over dp2:
    a shared torso, per-head online and target heads, bootstrap masks over
    (dp, head), the TD loss's gradient by jax.grad of the local sum, the
    torso's gradient psum'd over (dp, head), the heads' over dp, divided by
    the psum'd mask count. Bugs: torso gradient not summed over heads, the
    mask count from the own shard, the greedy action from the target head
    (plain DQN, not double).
10. mirrored sampling written as one population per device (concat of
    e and -e, so the gathered population is interleaved by device, unlike
    the baseline's [eps, -eps]). Bugs: mirror not negated, ranks per shard.
11. ranks as counts of smaller gathered fitnesses, CMA-style log utilities
    looked up by rank (pop4). Bugs: counts with <= (ranks one too high),
    estimate not psum'd.
12. a uniform soup as a pmean of per-device member means, its validation
    accuracy psum'd over dp (ens4 x dp2). Bugs: pmean over dp (wrong axis),
    accuracy psum'd over ens too.
13. a pairwise tournament on pop8 (partner by a ppermute swap i ^ 1, the
    loser takes the winner's weights). Bug: partner by a cyclic shift.
14. a weighted snapshot ensemble, snapshot weights a softmax over the
    sharded snapshot axis (pmax, psum), snap4 x dp2. Bugs: weights
    normalised locally, probabilities pmean'd instead of psum'd.
15. the antithetic estimate with the sign on the noise (up eps + um (-eps)),
    ranks by lax.sort of (fitness, id) scattered back, the update written
    as theta - lr * (-g). Bugs: the minus noise left unflipped, sorted
    descending.
16. three NES generations in a lax.scan, noise of all generations passed
    replicated and sliced at axis_index * n_local, fitness psum'd over dp,
    z-scores from psum'd moments (pop4 x dp2). Bugs: slice at offset 0,
    first moment local. (A first draft's bug "second moment local" made the
    variance negative, hence NaN, which the numerics' max_abs_diff reads as
    0: replaced.)
17. CMA-ES rank-mu covariance by psum_scatter over rows and all_gather,
    raw log weights normalised by a psum (pop4). Bug: mean shift not
    psum'd. (A first draft's bug "weights normalised locally" divided by 0
    on a device holding no selected member, NaN again: replaced.)
18. a Poisson-bootstrap deep ensemble step (ens4 x dp2), counts over
    (ens, dp), vmap of jax.grad, optax.sgd with momentum. Bug: the count
    totals psum'd over ens too.
19. a soup of bf16 members averaged in f32 by psum_scatter + all_gather.
    Bug: divided by the local member count.
20. ensemble mean and variance with the sum written as pmean times
    psum(1, axis). Bugs: pmean not rescaled, variance over the local
    members.
21. PBT copy-the-best by pmax, a score == best mask and a psum (every
    device wants the same source). Bugs: pmin, learning rate not copied.
22. snapshot ensemble in log space, log-mean-exp over snap4 (pmax, psum of
    exp). Bugs: local max only, local snapshot count.
23. ranks as a psum over pop of per-device comparison counts. Bug: local
    slice at offset 0.
24. ES with theta sharded over tp (pop2 x tp4), fitness matvec psum'd over
    tp. Bug: no psum over tp.
25. members over two mesh axes at once (P(("ens", "dp"))), per-member
    masks from fold_in(key, ens * 4 + dp). Bug: the member id's axes
    swapped.
GSPMD pairs (jax.jit with in/out shardings): 10. the antithetic OpenAI-ES
step of 1. with the noise over pop8; 11. the CMA-ES update of 3. with the
candidates over pop4; 12. the BatchEnsemble step of 4. with members over
ens and data over dp; 13. a uniform soup of 8 members over ens4 evaluated
on validation data over dp2; 14. PBT exploit with jnp.take of the stacked
population over pop8; 15. a deep ensemble of 8 MLPs trained with
jax.vmap(jax.value_and_grad) and optax.adamw, members over ens4 and data
over dp2; 16. the parameter-sharded ES step of 24., noise over (pop, tp).
A first draft of 6. fetched each device's source by a psum of one-hot
masked copies, which is wrong when devices want different sources (the
numerics showed it); 21. keeps that idiom where it is right.
Numerics: every correct pair agrees with its baseline at rounding level;
every bug variant differs clearly (see "numerics").
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh60.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh60.sh)
from fresh_lib import Corpus, seeded, state_specs  # noqa: E402

SCRIPT = "samples/gen/fresh60.py"
C = Corpus("samples/fresh60", SCRIPT, "samples/gen/run_fresh60.sh", sys.argv[1:])
rng, R, I = seeded(6060)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def centered_ranks(f):
    """OpenAI-ES fitness shaping: ranks in [-0.5, 0.5]."""
    r = jnp.argsort(jnp.argsort(f)).astype(jnp.float32)
    return r / (f.shape[0] - 1) - 0.5


# ---------------------------------------------------------------------------
# 1. OpenAI-ES with antithetic pairs, noise over pop8.
D1, N1, SIG1 = 16, 16, 0.1
OPT1 = optax.adam(0.05)


def lin_fit(w, X, y):
    return -jnp.mean(jnp.square(X @ w - y))


def es_step(theta, mu, nu, count, eps, X, y):
    fp = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(eps)
    fm = jax.vmap(lambda e: lin_fit(theta - SIG1 * e, X, y))(eps)
    u = centered_ranks(jnp.concatenate([fp, fm]))
    g = (u[:N1] - u[N1:]) @ eps / (2 * N1 * SIG1)
    st = (optax.ScaleByAdamState(count, mu, nu), optax.EmptyState())
    upd, (s2, _) = OPT1.update(-g, st, theta)
    return theta + upd, s2.mu, s2.nu, s2.count, g


def es_pop(bug):
    def f(theta, mu, nu, count, eps, X, y):
        nl = eps.shape[0]
        me = idx("pop")
        fp = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(eps)
        sgn = 1.0 if bug == "antithetic-same-sign" else -1.0
        fm = jax.vmap(lambda e: lin_fit(theta + sgn * SIG1 * e, X, y))(eps)
        if bug == "ranks-per-shard":
            u = centered_ranks(jnp.concatenate([fp, fm]))
            up, um = u[:nl], u[nl:]
        else:
            FP = lax.all_gather(fp, "pop", tiled=True)
            FM = lax.all_gather(fm, "pop", tiled=True)
            u = centered_ranks(jnp.concatenate([FP, FM]))
            up = lax.dynamic_slice_in_dim(u, me * nl, nl)
            um = lax.dynamic_slice_in_dim(u, N1 + me * nl, nl)
        g = jnp.einsum("n,nd->d", up - um, eps) / (2 * N1 * SIG1)
        if bug != "no-psum":
            g = psum(g, "pop")
        st = (optax.ScaleByAdamState(count, mu, nu), optax.EmptyState())
        upd, (s2, _) = OPT1.update(-g, st, theta)
        return theta + upd, s2.mu, s2.nu, s2.count, g
    return f


W1TRUE = R(D1)
X1 = R(32, D1)
Y1 = X1 @ W1TRUE + 0.1 * R(32)
ARGS1 = (R(D1, scale=0.3), R(D1, scale=0.01), np.abs(R(D1, scale=0.01)), np.int32(3), R(N1, D1), X1, Y1)
C.smap("s.openai_es_antithetic_centered_ranks.pop8", {"pop": 8}, es_pop,
       (P(), P(), P(), P(), P("pop"), P(), P()), (P(), P(), P(), P(), P()), es_step, ARGS1,
       bugs=[("ranks-per-shard", ["wrong-collective-op"]), ("no-psum", ["missing-collective"]),
             ("antithetic-same-sign", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 2. NES on pop4 x dp2, noise from fold_in(key, member id), fitness psum'd
#    over dp, z-scored over the population.
D2, N2, SIG2, LR2 = 8, 8, 0.05, 0.2


def member_noise(key, i):
    return jax.random.normal(jax.random.fold_in(key, i), (D2,))


def nes_loss(w, X, y):
    return jnp.sum(jnp.square(jnp.tanh(X @ w) - y))


def nes_step(theta, key, X, y):
    eps = jax.vmap(lambda i: member_noise(key, i))(jnp.arange(N2))
    f = -jax.vmap(lambda e: nes_loss(theta + SIG2 * e, X, y))(eps) / X.shape[0]
    z = (f - jnp.mean(f)) / (jnp.std(f) + 1e-8)
    g = z @ eps / (N2 * SIG2)
    return theta + LR2 * g, f


def nes_mesh(bug):
    def f(theta, key, X, y):
        nl = N2 // 4
        me = idx("pop")
        nb = X.shape[0] * 2

        def body(j, carry):
            fs, es = carry
            gid = j if bug == "fold-in-local-index" else me * nl + j
            e = member_noise(key, gid)
            fj = -nes_loss(theta + SIG2 * e, X, y)
            if bug != "fitness-not-summed-over-dp":
                fj = psum(fj, "dp")
            return fs.at[j].set(fj / nb), es.at[j].set(e)
        fs, es = lax.fori_loop(0, nl, body, (jnp.zeros(nl), jnp.zeros((nl, D2))))
        if bug == "zscore-within-shard":
            z = (fs - jnp.mean(fs)) / (jnp.std(fs) + 1e-8)
        else:
            allf = lax.all_gather(fs, "pop", tiled=True)
            z = (fs - jnp.mean(allf)) / (jnp.std(allf) + 1e-8)
        g = psum(z @ es, "pop") / (N2 * SIG2)
        return theta + LR2 * g, fs
    return f


X2 = R(24, D2)
Y2 = np.tanh(X2 @ R(D2)) + 0.05 * R(24)
KEY2 = np.array([0, 60], np.uint32)
C.smap("s.nes_foldin_noise_zscore_fitness_dp.pop4xdp2", {"pop": 4, "dp": 2}, nes_mesh,
       (P(), P(), P("dp"), P("dp")), (P(), P("pop")), nes_step, (R(D2, scale=0.3), KEY2, X2, Y2),
       bugs=[("fitness-not-summed-over-dp", ["missing-collective"]), ("zscore-within-shard", ["wrong-collective-op"]),
             ("fold-in-local-index", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 3. CMA-ES update from a population over pop4.
D3, LAM3 = 6, 16
MU3 = LAM3 // 2
_w = np.log(MU3 + 0.5) - np.log(np.arange(1, MU3 + 1))
W3 = np.concatenate([_w / _w.sum(), np.zeros(LAM3 - MU3)]).astype(np.float32)
MUEFF3 = float(1.0 / np.sum(W3[:MU3] ** 2))
CC3, C13, CMU3, CM3 = 0.4, 0.05, 0.2, 1.0
SCALE3 = np.linspace(1.0, 6.0, D3).astype(np.float32)


def sphere(x):
    return jnp.sum(SCALE3 * jnp.square(x - 1.0), -1)


def cma_update(m, sigma, A, Cm, pc, z):
    y = z @ A.T
    f = sphere(m + sigma * y)
    w = jnp.asarray(W3)[jnp.argsort(jnp.argsort(f))]
    yw = w @ y
    m2 = m + CM3 * sigma * yw
    pc2 = (1 - CC3) * pc + np.sqrt(CC3 * (2 - CC3) * MUEFF3) * yw
    rmu = jnp.einsum("n,ni,nj->ij", w, y, y)
    C2 = (1 - C13 - CMU3) * Cm + C13 * jnp.outer(pc2, pc2) + CMU3 * rmu
    return m2, pc2, C2


def cma_pop(bug):
    def f(m, sigma, A, Cm, pc, z):
        nl = z.shape[0]
        me = idx("pop")
        y = jnp.dot(z, A.T)
        fl = sphere(m + sigma * y)
        if bug == "local-rank-weights":
            rk = jnp.argsort(jnp.argsort(fl))
        else:
            fa = lax.all_gather(fl, "pop", tiled=True)
            rk = lax.dynamic_slice_in_dim(jnp.argsort(jnp.argsort(fa)), me * nl, nl)
        w = jnp.take(jnp.asarray(W3), rk)
        yw = (pmean if bug == "mean-shift-pmean" else psum)(jnp.dot(w, y), "pop")
        m2 = m + CM3 * sigma * yw
        pc2 = (1 - CC3) * pc + np.sqrt(CC3 * (2 - CC3) * MUEFF3) * yw
        rmu = jnp.dot((y * w[:, None]).T, y)
        if bug != "rank-mu-not-psummed":
            rmu = psum(rmu, "pop")
        C2 = (1 - C13 - CMU3) * Cm + C13 * pc2[:, None] * pc2[None, :] + CMU3 * rmu
        return m2, pc2, C2
    return f


_C3 = np.eye(D3) + 0.3 * np.ones((D3, D3))
ARGS3 = (R(D3), np.float32(0.5), np.linalg.cholesky(_C3).astype(np.float32), _C3.astype(np.float32),
         R(D3, scale=0.1), R(LAM3, D3))
C.smap("s.cmaes_rank_mu_path_update.pop4", {"pop": 4}, cma_pop,
       (P(), P(), P(), P(), P(), P("pop")), (P(), P(), P()), cma_update, ARGS3,
       bugs=[("local-rank-weights", ["wrong-collective-op"]), ("rank-mu-not-psummed", ["missing-collective"]),
             ("mean-shift-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 4. BatchEnsemble training step on ens2 x dp4.
M4, B4, DI4, DH4, NC4 = 4, 16, 8, 12, 5
OPT4 = optax.adam(1e-2)


def be_logits(p, x):
    """Logits (M, B, C) of every member: ((x * r_m) W) * s_m, relu, head."""
    def one(r, s, b):
        h = jax.nn.relu(((x * r) @ p["W"]) * s + b)
        return h @ p["V"]
    return jax.vmap(one)(p["r"], p["s"], p["b"])


def be_loss(p, x, lab):
    lg = be_logits(p, x)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, jnp.broadcast_to(lab, lg.shape[:2])))


def be_step(p, st, x, lab):
    l, g = jax.value_and_grad(be_loss)(p, x, lab)
    u, st = OPT4.update(g, st, p)
    return optax.apply_updates(p, u), st, l


P4 = {"W": R(DI4, DH4, scale=0.4), "V": R(DH4, NC4, scale=0.4), "r": 1 + R(M4, DI4, scale=0.2),
      "s": 1 + R(M4, DH4, scale=0.2), "b": R(M4, DH4, scale=0.1)}
S4 = jax.tree.map(np.asarray, OPT4.init(P4))
SPEC4 = {"W": P(), "V": P(), "r": P("ens"), "s": P("ens"), "b": P("ens")}
SS4 = state_specs(S4, SPEC4)


def be_mesh(bug):
    def f(p, st, x, lab):
        def local(p):
            lg = be_logits(p, x)
            ce = optax.softmax_cross_entropy_with_integer_labels(lg, jnp.broadcast_to(lab, lg.shape[:2]))
            return jnp.sum(ce) / (M4 * B4)
        l, g = jax.value_and_grad(local)(p)
        shared_axes = ("dp",) if bug == "shared-grad-not-summed-over-ens" else ("ens", "dp")
        fast_axes = ("ens", "dp") if bug == "fast-grad-summed-over-ens" else ("dp",)
        g = {k: psum(v, shared_axes if k in ("W", "V") else fast_axes) for k, v in g.items()}
        u, st = OPT4.update(g, st, p)
        return optax.apply_updates(p, u), st, psum(l, ("ens", "dp"))
    return f


C.smap("s.batchensemble_shared_vs_fast_grads.ens2xdp4", {"ens": 2, "dp": 4}, be_mesh,
       (SPEC4, SS4, P("dp"), P("dp")), (SPEC4, SS4, P()), be_step, (P4, S4, R(B4, DI4), I(0, NC4, B4)),
       bugs=[("shared-grad-not-summed-over-ens", ["missing-collective"]),
             ("fast-grad-summed-over-ens", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 5. greedy-prefix model soup on ens4 x dp2.
M5, D5, H5, K5, NV5 = 8, 8, 16, 4, 16


def mlp(w1, b1, w2, x):
    return jnp.tanh(x @ w1 + b1) @ w2


def val_loss_sum(w1, b1, w2, x, lab):
    return jnp.sum(optax.softmax_cross_entropy_with_integer_labels(mlp(w1, b1, w2, x), lab))


def soup(w1, b1, w2, xv, lv):
    loss = jax.vmap(val_loss_sum, (0, 0, 0, None, None))(w1, b1, w2, xv, lv) / NV5
    rk = jnp.argsort(jnp.argsort(loss))
    ks = jnp.arange(1, M5 + 1)
    a = (rk[None, :] < ks[:, None]) / ks[:, None]  # (k, member)
    s1, sb, s2 = (jnp.tensordot(a, t, 1) for t in (w1, b1, w2))
    sl = jax.vmap(val_loss_sum, (0, 0, 0, None, None))(s1, sb, s2, xv, lv) / NV5
    k = jnp.argmin(sl)
    return s1[k], sb[k], s2[k], sl


def soup_mesh(bug):
    def f(w1, b1, w2, xv, lv):
        ml = w1.shape[0]
        me = idx("ens")
        loss = psum(jax.vmap(val_loss_sum, (0, 0, 0, None, None))(w1, b1, w2, xv, lv), "dp") / NV5
        if bug == "ranks-per-shard":
            rk = jnp.argsort(jnp.argsort(loss))
        else:
            allv = lax.all_gather(loss, "ens", tiled=True)
            rk = lax.dynamic_slice_in_dim(jnp.argsort(jnp.argsort(allv)), me * ml, ml)
        ks = jnp.arange(1, M5 + 1)
        inc = (rk[None, :] < ks[:, None]).astype(jnp.float32)
        if bug == "divide-by-local-count":
            a = inc / jnp.maximum(inc.sum(1, keepdims=True), 1.0)
        else:
            a = inc / ks[:, None]
        ax = "dp" if bug == "soup-over-dp" else "ens"
        s1, sb, s2 = (psum(jnp.einsum("km,m...->k...", a, t), ax) for t in (w1, b1, w2))
        sl = psum(jax.vmap(val_loss_sum, (0, 0, 0, None, None))(s1, sb, s2, xv, lv), "dp") / NV5
        k = jnp.argmin(sl)
        return s1[k], sb[k], s2[k], sl
    return f


_base5 = (R(D5, H5, scale=0.5), R(H5, scale=0.1), R(H5, K5, scale=0.5))
ARGS5 = (np.stack([_base5[0] + R(D5, H5, scale=0.15) for _ in range(M5)]),
         np.stack([_base5[1] + R(H5, scale=0.05) for _ in range(M5)]),
         np.stack([_base5[2] + R(H5, K5, scale=0.15) for _ in range(M5)]), R(NV5, D5), I(0, K5, NV5))
C.smap("s.greedy_prefix_model_soup.ens4xdp2", {"ens": 4, "dp": 2}, soup_mesh,
       (P("ens"), P("ens"), P("ens"), P("dp"), P("dp")), (P(), P(), P(), P()), soup, ARGS5,
       bugs=[("ranks-per-shard", ["wrong-collective-op"]), ("soup-over-dp", ["wrong-axis"]),
             ("divide-by-local-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 6. PBT exploit / explore, one member per device on pop8.
N6, D6, H6 = 8, 6, 4


def pbt_exploit(w, mom, lr, score, coin):
    rk = jnp.argsort(jnp.argsort(score))  # 0 = worst
    order = jnp.argsort(score)            # order[r] = member of rank r
    src = jnp.where(rk < 2, order[N6 - 1 - rk], jnp.arange(N6))
    lr2 = jnp.where(rk < 2, lr[src] * jnp.where(coin, 1.2, 0.8), lr)
    return w[src], mom[src], lr2


def pbt_mesh(bug):
    def f(w, mom, lr, score, coin):
        me = idx("pop")
        allsc = lax.all_gather(score, "pop", tiled=True)
        if bug == "ranked-descending":
            allsc = -allsc
        order = jnp.argsort(allsc)
        myrank = jnp.argsort(order)[me]
        srcrank = (5 if bug == "copy-wrong-rank" else N6 - 1) - myrank
        src = jnp.where(myrank < 2, order[jnp.clip(srcrank, 0, N6 - 1)], me)
        w2 = lax.all_gather(w, "pop", tiled=True)[src][None]
        m2 = lax.all_gather(mom, "pop", tiled=True)[src][None]
        lsrc = lr if bug == "perturb-own-lr" else lax.all_gather(lr, "pop", tiled=True)[src][None]
        lr2 = jnp.where(myrank < 2, lsrc * jnp.where(coin, 1.2, 0.8), lr)
        return w2, m2, lr2
    return f


C.smap("s.pbt_truncation_exploit_explore.pop8", {"pop": 8}, pbt_mesh,
       (P("pop"),) * 5, (P("pop"),) * 3, pbt_exploit,
       (R(N6, D6, H6), R(N6, D6, H6, scale=0.1), np.exp(R(N6) - 4.0), R(N6), rng.random(N6) < 0.5),
       bugs=[("copy-wrong-rank", ["wrong-offset"]), ("perturb-own-lr", ["missing-collective"]),
             ("ranked-descending", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. elitism: SGD step per member, then best overwrites worst; pop4, 2 per device.
N7, D7, B7, LR7 = 8, 6, 8, 0.1


def member_loss(w, x, y):
    return jnp.mean(jnp.square(x @ w - y))


def elitism(w, x, y):
    w = w - LR7 * jax.vmap(jax.grad(member_loss))(w, x, y)
    sc = -jax.vmap(member_loss)(w, x, y)
    best, worst = jnp.argmax(sc), jnp.argmin(sc)
    return w.at[worst].set(w[best]), sc


def elit_mesh(bug):
    def f(w, x, y):
        nl = w.shape[0]
        me = idx("pop")
        w = w - LR7 * jax.vmap(jax.grad(member_loss))(w, x, y)
        sc = -jax.vmap(member_loss)(w, x, y)
        allsc = lax.all_gather(sc, "pop", tiled=True)
        allw = lax.all_gather(w, "pop", tiled=True)
        if bug == "local-argmax":
            bw = w[jnp.argmax(sc)]
        else:
            bw = allw[jnp.argmax(allsc)]
        worst = jnp.argmin(allsc)
        loc = worst if bug == "worst-slot-no-offset" else worst - me * nl
        hit = (jnp.arange(nl) == loc)[:, None]
        return jnp.where(hit, bw[None], w), sc
    return f


C.smap("s.population_elitism_best_over_worst.pop4", {"pop": 4}, elit_mesh,
       (P("pop"),) * 3, (P("pop"), P("pop")), elitism, (R(N7, D7), R(N7, B7, D7), R(N7, B7)),
       bugs=[("local-argmax", ["wrong-collective-op"]), ("worst-slot-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 8. snapshot-ensemble predictions, hidden over tp4, batch over dp2.
S8, B8, D8, H8, K8 = 4, 8, 8, 16, 6


def snap_pred(w1, w2, x, lab):
    lg = jnp.einsum("bd,sdh->sbh", x, w1)
    lg = jnp.einsum("sbh,shk->sbk", jax.nn.gelu(lg), w2)
    p = jnp.mean(jax.nn.softmax(lg, -1), 0)
    nll = -jnp.mean(jnp.log(jnp.take_along_axis(p, lab[:, None], 1)))
    return p, nll


def snap_mesh(bug):
    def f(w1, w2, x, lab):
        h = jax.nn.gelu(jnp.einsum("bd,sdh->sbh", x, w1))
        part = jnp.einsum("sbh,shk->sbk", h, w2)
        if bug == "softmax-before-psum":
            p = jnp.mean(psum(jax.nn.softmax(part, -1), "tp"), 0) / 4
        elif bug == "average-logits":
            p = jax.nn.softmax(jnp.mean(psum(part, "tp"), 0), -1)
        else:
            p = jnp.mean(jax.nn.softmax(psum(part, "tp"), -1), 0)
        ll = jnp.sum(jnp.log(jnp.take_along_axis(p, lab[:, None], 1)))
        if bug == "nll-pmean-tp-too":
            nll = -pmean(ll, ("dp", "tp")) / B8
        else:
            nll = -psum(ll, "dp") / B8
        return p, nll
    return f


C.smap("s.snapshot_ensemble_probs_tp_rowparallel.dp2xtp4", {"dp": 2, "tp": 4}, snap_mesh,
       (P(None, None, "tp"), P(None, "tp"), P("dp"), P("dp")), (P("dp"), P()), snap_pred,
       (R(S8, D8, H8, scale=0.5), R(S8, H8, K8, scale=0.5), R(B8, D8), I(0, K8, B8)),
       bugs=[("softmax-before-psum", ["wrong-collective-op"]), ("average-logits", ["wrong-scale"]),
             ("nll-pmean-tp-too", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 9. bootstrapped double DQN, 8 heads over head4, batch over dp2.
K9, B9, O9, H9, A9, G9 = 8, 8, 6, 10, 3, 0.9


def qheads(torso, heads, s):
    return jnp.einsum("bh,kha->bka", jax.nn.relu(s @ torso), heads)


def boot_loss_terms(torso, heads, tgt_torso, tgt_heads, s, a, r, s2, d, mask, double=True):
    q = jnp.take_along_axis(qheads(torso, heads, s), a[:, None, None], 2)[..., 0]  # (b, k)
    qt = qheads(tgt_torso, tgt_heads, s2)
    if double:
        an = jnp.argmax(qheads(torso, heads, s2), -1)
    else:
        an = jnp.argmax(qt, -1)
    qn = jnp.take_along_axis(qt, an[..., None], 2)[..., 0]
    y = lax.stop_gradient(r[:, None] + G9 * (1.0 - d[:, None]) * qn)
    return jnp.sum(mask * jnp.square(q - y)), jnp.sum(mask)


def boot_grads(torso, heads, tgt_torso, tgt_heads, s, a, r, s2, d, mask):
    def loss(torso, heads):
        l, n = boot_loss_terms(torso, heads, tgt_torso, tgt_heads, s, a, r, s2, d, mask)
        return l / n
    l, (gt, gh) = jax.value_and_grad(loss, (0, 1))(torso, heads)
    return l, gt, gh


def boot_mesh(bug):
    def f(torso, heads, tgt_torso, tgt_heads, s, a, r, s2, d, mask):
        n = jnp.sum(mask) if bug == "mask-count-local" else psum(jnp.sum(mask), ("dp", "head"))

        def loss(torso, heads):
            l, _ = boot_loss_terms(torso, heads, tgt_torso, tgt_heads, s, a, r, s2, d, mask,
                                   double=bug != "greedy-from-target")
            return l / n
        l, (gt, gh) = jax.value_and_grad(loss, (0, 1))(torso, heads)
        gt = psum(gt, "dp" if bug == "torso-grad-not-summed-over-heads" else ("dp", "head"))
        return psum(l, ("dp", "head")), gt, psum(gh, "dp")
    return f


C.smap("s.bootstrapped_double_dqn_heads.dp2xhead4", {"dp": 2, "head": 4}, boot_mesh,
       (P(), P("head"), P(), P("head"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp"), P("dp", "head")),
       (P(), P(), P("head")), boot_grads,
       (R(O9, H9, scale=0.5), R(K9, H9, A9, scale=0.5), R(O9, H9, scale=0.5), R(K9, H9, A9, scale=0.5),
        R(B9, O9), I(0, A9, B9), R(B9), R(B9, O9), (rng.random(B9) < 0.3).astype(np.float32),
        (rng.random((B9, K9)) < 0.6).astype(np.float32)),
       bugs=[("torso-grad-not-summed-over-heads", ["missing-collective"]), ("mask-count-local", ["missing-collective"]),
             ("greedy-from-target", ["wrong-operand"])])

# ---------------------------------------------------------------------------
# 10. mirrored sampling written as one population: each device builds
#     concat([e, -e]) of its noise, so the gathered population is interleaved
#     per device, unlike the baseline's [eps, -eps]; ranks and the weighted
#     sum do not care about the order.


def es_mirror(theta, eps, X, y):
    noise = jnp.concatenate([eps, -eps])
    f = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(noise)
    u = centered_ranks(f)
    g = u @ noise / (noise.shape[0] * SIG1)
    return theta + 0.5 * g, g


def es_mirror_pop(bug):
    def f(theta, eps, X, y):
        me = idx("pop")
        noise = jnp.concatenate([eps, eps if bug == "mirror-not-negated" else -eps])
        fl = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(noise)
        nl = noise.shape[0]
        if bug == "ranks-per-shard":
            u = centered_ranks(fl)
        else:
            u = lax.dynamic_slice_in_dim(centered_ranks(lax.all_gather(fl, "pop", tiled=True)), me * nl, nl)
        g = psum(u @ noise, "pop") / (2 * N1 * SIG1)
        return theta + 0.5 * g, g
    return f


C.smap("s.es_mirrored_interleaved_population.pop8", {"pop": 8}, es_mirror_pop,
       (P(), P("pop"), P(), P()), (P(), P()), es_mirror, (ARGS1[0], ARGS1[4], X1, Y1),
       bugs=[("mirror-not-negated", ["wrong-scale"]), ("ranks-per-shard", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 11. ranks by comparison counts: each member's rank is the number of
#     population fitnesses below its own (all_gather'd), the utilities the
#     CMA-style log weights looked up by rank; baseline with argsort.
N11, D11 = 16, 8
_u = np.maximum(0.0, np.log(N11 / 2 + 1) - np.log(np.arange(1, N11 + 1)))
U11 = (_u / _u.sum() - 1.0 / N11).astype(np.float32)


def cnt_es(theta, eps, A):
    f = jnp.sum(jnp.square((theta + 0.1 * eps) @ A), -1)  # minimised
    u = jnp.asarray(U11)[jnp.argsort(jnp.argsort(f))]
    return u @ eps / (N11 * 0.1)


def cnt_pop(bug):
    def f(theta, eps, A):
        fl = jnp.sum(jnp.square((theta + 0.1 * eps) @ A), -1)
        F = lax.all_gather(fl, "pop", tiled=True)
        less = (F[None, :] <= fl[:, None]) if bug == "rank-counts-le" else (F[None, :] < fl[:, None])
        rk = jnp.sum(less.astype(jnp.int32), 1)
        u = jnp.asarray(U11)[jnp.minimum(rk, N11 - 1)]
        g = u @ eps / (N11 * 0.1)
        return g if bug == "no-psum" else psum(g, "pop")
    return f


C.smap("s.es_rank_by_comparison_counts.pop4", {"pop": 4}, cnt_pop, (P(), P("pop"), P()), P(), cnt_es,
       (R(D11, scale=0.5), R(N11, D11), R(D11, D11, scale=0.5)),
       bugs=[("rank-counts-le", ["wrong-offset"]), ("no-psum", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 12. uniform soup as a pmean of per-device member means (equal counts per
#     device), evaluated by accuracy on validation data over dp.


def usoup_acc(w1, b1, w2, xv, lv):
    s1, sb, s2 = (jnp.mean(t, 0) for t in (w1, b1, w2))
    acc = jnp.mean((jnp.argmax(mlp(s1, sb, s2, xv), -1) == lv).astype(jnp.float32))
    return s2, mlp(s1, sb, s2, xv), acc


def usoup_mesh(bug):
    def f(w1, b1, w2, xv, lv):
        ax = "dp" if bug == "pmean-over-dp" else "ens"
        s1, sb, s2 = (pmean(jnp.mean(t, 0), ax) for t in (w1, b1, w2))
        lg = mlp(s1, sb, s2, xv)
        hit = jnp.sum((jnp.argmax(lg, -1) == lv).astype(jnp.float32))
        acc = psum(hit, ("ens", "dp") if bug == "acc-psum-ens-too" else "dp") / NV5
        return s2, lg, acc
    return f


C.smap("s.uniform_soup_pmean_of_means_acc.ens4xdp2", {"ens": 4, "dp": 2}, usoup_mesh,
       (P("ens"), P("ens"), P("ens"), P("dp"), P("dp")), (P(), P("dp"), P()), usoup_acc, ARGS5,
       bugs=[("pmean-over-dp", ["wrong-axis"]), ("acc-psum-ens-too", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 13. pairwise tournament on pop8: members 2k and 2k+1 compare scores, the
#     loser takes the winner's weights (partner by a ppermute swap).


def tournament(w, score):
    wp, sp = w.reshape(4, 2, *w.shape[1:]), score.reshape(4, 2)
    win = jnp.argmax(sp, 1)
    ww = jnp.take_along_axis(wp, win[:, None, None, None], 1)
    return jnp.broadcast_to(ww, wp.shape).reshape(w.shape)


def tour_mesh(bug):
    def f(w, score):
        if bug == "partner-by-shift":
            perm = [(i, (i + 1) % 8) for i in range(8)]
        else:
            perm = [(i, i ^ 1) for i in range(8)]
        pw, ps = lax.ppermute(w, "pop", perm), lax.ppermute(score, "pop", perm)
        me = idx("pop")
        # ties go to the even member, as argmax picks the first
        take = jnp.where(me % 2 == 0, ps > score, ps >= score)
        return jnp.where(take[:, None, None], pw, w)
    return f


C.smap("s.pairwise_tournament_ppermute_swap.pop8", {"pop": 8}, tour_mesh, (P("pop"), P("pop")), P("pop"),
       tournament, (R(8, 4, 6), R(8)), bugs=[("partner-by-shift", ["wrong-permutation"])])

# ---------------------------------------------------------------------------
# 14. a weighted snapshot ensemble, snapshots over snap4 and batch over dp2:
#     the snapshot weights a softmax of learned logits over the sharded
#     snapshot axis (pmax, psum), member probabilities weighted and psum'd.
S14 = 8


def wsnap(alpha, w1, w2, x):
    wt = jax.nn.softmax(alpha)
    p = jax.nn.softmax(jnp.einsum("sbh,shk->sbk", jnp.tanh(jnp.einsum("bd,sdh->sbh", x, w1)), w2), -1)
    return jnp.einsum("s,sbk->bk", wt, p)


def wsnap_mesh(bug):
    def f(alpha, w1, w2, x):
        m = pmax(jnp.max(alpha), "snap")
        e = jnp.exp(alpha - m)
        wt = e / (jnp.sum(e) if bug == "weights-normalised-locally" else psum(jnp.sum(e), "snap"))
        p = jax.nn.softmax(jnp.einsum("sbh,shk->sbk", jnp.tanh(jnp.einsum("bd,sdh->sbh", x, w1)), w2), -1)
        return (pmean if bug == "probs-pmean" else psum)(jnp.einsum("s,sbk->bk", wt, p), "snap")
    return f


C.smap("s.weighted_snapshot_softmax_over_snap.snap4xdp2", {"snap": 4, "dp": 2}, wsnap_mesh,
       (P("snap"), P("snap"), P("snap"), P("dp")), P("dp"), wsnap,
       (R(S14), R(S14, D8, H8, scale=0.5), R(S14, H8, K8, scale=0.5), R(B8, D8)),
       bugs=[("weights-normalised-locally", ["missing-collective"]), ("probs-pmean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 15. the antithetic estimate written with the signs on the other side: the
#     minus member's noise is -eps and its utility multiplies that noise
#     (up eps + um (-eps)), ranks from a lax.sort of (fitness, id) pairs
#     scattered back, the update subtracted from a loss gradient's view
#     (theta - lr * (-g)).


def es_sorted_ranks(f):
    n = f.shape[0]
    _, order = lax.sort((f, jnp.arange(n)), num_keys=1)
    return jnp.zeros(n, jnp.float32).at[order].set(jnp.arange(n, dtype=jnp.float32)) / (n - 1) - 0.5


def es_flip_pop(bug):
    def f(theta, eps, X, y):
        nl = eps.shape[0]
        me = idx("pop")
        neg = -eps
        fp = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(eps)
        fm = jax.vmap(lambda e: lin_fit(theta + SIG1 * e, X, y))(neg)
        F = jnp.concatenate([lax.all_gather(fp, "pop", tiled=True), lax.all_gather(fm, "pop", tiled=True)])
        u = es_sorted_ranks(-F if bug == "sorted-descending" else F)
        up = lax.dynamic_slice_in_dim(u, me * nl, nl)
        um = lax.dynamic_slice_in_dim(u, N1 + me * nl, nl)
        est = up @ eps + um @ (eps if bug == "minus-noise-unflipped" else neg)
        ghat = -psum(est, "pop") / (2 * N1 * SIG1)  # the loss-gradient view
        return theta - 0.5 * ghat, -ghat
    return f


C.smap("s.es_antithetic_sign_on_noise_sorted_ranks.pop8", {"pop": 8}, es_flip_pop,
       (P(), P("pop"), P(), P()), (P(), P()),
       lambda theta, eps, X, y: es_mirror(theta, eps, X, y), (ARGS1[0], ARGS1[4], X1, Y1),
       bugs=[("minus-noise-unflipped", ["wrong-scale"]), ("sorted-descending", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 16. three NES generations in a lax.scan, the noise of every generation
#     passed replicated (G, N, D) and each device slicing its members at
#     axis_index * n_local, the fitness a psum over dp of the data halves,
#     z-scores from psum'd first and second moments.
G16, N16, D16 = 3, 8, 6


def nes_gens(theta, noise, X, y):
    def gen(th, eps):
        f = -jax.vmap(lambda e: jnp.mean(jnp.square(X @ (th + 0.1 * e) - y)))(eps)
        z = (f - f.mean()) / jnp.sqrt(f.var() + 1e-6)
        g = z @ eps / (N16 * 0.1)
        return th + 0.1 * g, f.mean()
    return lax.scan(gen, theta, noise)


def nes_gens_mesh(bug):
    def f(theta, noise, X, y):
        nl = N16 // 4
        off = 0 if bug == "noise-slice-offset-0" else idx("pop") * nl
        nb = X.shape[0] * 2

        def gen(th, eps_all):
            eps = lax.dynamic_slice_in_dim(eps_all, off, nl)
            sse = jax.vmap(lambda e: jnp.sum(jnp.square(X @ (th + 0.1 * e) - y)))(eps)
            fl = -psum(sse, "dp") / nb
            s1 = jnp.sum(fl) if bug == "first-moment-local" else psum(jnp.sum(fl), "pop")
            s2 = psum(jnp.sum(fl * fl), "pop")
            mean = s1 / N16
            var = s2 / N16 - mean * mean
            z = (fl - mean) / jnp.sqrt(var + 1e-6)
            g = psum(z @ eps, "pop") / (N16 * 0.1)
            return th + 0.1 * g, mean
        return lax.scan(gen, theta, noise)
    return f


X16 = R(16, D16)
Y16 = X16 @ R(D16) + 0.1 * R(16)
C.smap("s.nes_scan_generations_sliced_noise_moments.pop4xdp2", {"pop": 4, "dp": 2}, nes_gens_mesh,
       (P(), P(), P("dp"), P("dp")), (P(), P()), nes_gens, (R(D16, scale=0.3), R(G16, N16, D16), X16, Y16),
       bugs=[("noise-slice-offset-0", ["wrong-offset"]), ("first-moment-local", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 17. CMA-ES rank-mu covariance as a reduce-scatter over the covariance rows
#     followed by an all_gather (an all-reduce in two steps), raw log weights
#     normalised by a psum of the selected weights.


def cma_rankmu(m, A, Cm, z):
    y = z @ A.T
    f = jnp.sum(jnp.square(m + 0.5 * y - 1.0), -1)
    rk = jnp.argsort(jnp.argsort(f))
    raw = jnp.where(rk < MU3, np.log(MU3 + 0.5) - jnp.log(rk + 1.0), 0.0)
    w = raw / raw.sum()
    return 0.7 * Cm + 0.3 * (y.T * w) @ y, m + 0.5 * w @ y


def cma_rs_mesh(bug):
    def f(m, A, Cm, z):
        nl = z.shape[0]
        me = idx("pop")
        y = z @ A.T
        fl = jnp.sum(jnp.square(m + 0.5 * y - 1.0), -1)
        rk = lax.dynamic_slice_in_dim(jnp.argsort(jnp.argsort(lax.all_gather(fl, "pop", tiled=True))), me * nl, nl)
        raw = jnp.where(rk < MU3, np.log(MU3 + 0.5) - jnp.log(rk + 1.0), 0.0)
        tot = psum(raw.sum(), "pop")
        w = raw / tot
        part = jnp.einsum("n,ni,nj->ij", w, y, y)
        rows = lax.psum_scatter(part, "pop", scatter_dimension=0, tiled=True)
        cov = lax.all_gather(rows, "pop", axis=0, tiled=True)
        shift = w @ y if bug == "mean-shift-not-psummed" else psum(w @ y, "pop")
        return 0.7 * Cm + 0.3 * cov, m + 0.5 * shift
    return f


D17 = 8
_C17 = np.eye(D17) + 0.2 * np.ones((D17, D17))
C.smap("s.cmaes_rank_mu_reduce_scatter_allgather.pop4", {"pop": 4}, cma_rs_mesh, (P(), P(), P(), P("pop")),
       (P(), P()), cma_rankmu,
       (R(D17), np.linalg.cholesky(_C17).astype(np.float32), _C17.astype(np.float32), R(LAM3, D17)),
       bugs=[("mean-shift-not-psummed", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 18. a Poisson-bootstrap deep ensemble step (ens4 x dp2): 8 linear-tanh
#     members, per-example bootstrap counts (M, B) over (ens, dp), each
#     member's weighted MSE normalised by its psum'd count total, vmap of
#     jax.grad, gradients psum'd over dp, optax.sgd with momentum.
M18, B18, D18 = 8, 16, 6
OPT18 = optax.sgd(0.1, momentum=0.9)


def boot_member_loss(w, cnt, x, y, tot):
    return jnp.sum(cnt * jnp.square(jnp.tanh(x @ w[:-1] + w[-1]) - y)) / tot


def boot_ens_step(w, tr, cnt, x, y):
    tot = cnt.sum(1)
    g = jax.vmap(jax.grad(boot_member_loss), (0, 0, None, None, 0))(w, cnt, x, y, tot)
    u, st = OPT18.update(g, (optax.TraceState(tr), optax.EmptyState()), w)
    return optax.apply_updates(w, u), st[0].trace


def boot_ens_mesh(bug):
    def f(w, tr, cnt, x, y):
        tot = psum(cnt.sum(1), ("ens", "dp") if bug == "count-total-over-ens-too" else "dp")
        g = jax.vmap(jax.grad(boot_member_loss), (0, 0, None, None, 0))(w, cnt, x, y, tot)
        g = psum(g, "dp")
        u, st = OPT18.update(g, (optax.TraceState(tr), optax.EmptyState()), w)
        return optax.apply_updates(w, u), st[0].trace
    return f


C.smap("s.poisson_bootstrap_ensemble_sgd_momentum.ens4xdp2", {"ens": 4, "dp": 2}, boot_ens_mesh,
       (P("ens"), P("ens"), P("ens", "dp"), P("dp"), P("dp")), (P("ens"), P("ens")), boot_ens_step,
       (R(M18, D18 + 1, scale=0.4), R(M18, D18 + 1, scale=0.05), rng.poisson(1.0, (M18, B18)).astype(np.float32),
        R(B18, D18), R(B18)),
       bugs=[("count-total-over-ens-too", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 19. a model soup of bf16 members averaged in f32 by a psum_scatter over
#     the flattened parameters and an all_gather, cast back to bf16.


def bf16_soup(w):
    return jnp.mean(w.astype(jnp.float32), 0).astype(jnp.bfloat16)


def bf16_soup_mesh(bug):
    def f(w):
        loc = jnp.sum(w.astype(jnp.float32), 0).reshape(-1)
        part = lax.psum_scatter(loc, "ens", scatter_dimension=0, tiled=True)
        full = lax.all_gather(part, "ens", axis=0, tiled=True)
        div = w.shape[0] if bug == "divide-by-local-members" else 8
        return (full / div).reshape(w.shape[1:]).astype(jnp.bfloat16)
    return f


C.smap("s.bf16_soup_f32_reduce_scatter_gather.ens4", {"ens": 4}, bf16_soup_mesh, (P("ens"),), P(), bf16_soup,
       (R(8, 8, 16).astype(jnp.bfloat16),), bugs=[("divide-by-local-members", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 20. the ensemble mean written the way some users write a sum: a pmean
#     times the axis size read back as psum(1, axis), and the member count
#     as a psum of the local counts; mean prediction and per-member variance
#     (epistemic spread) of 8 linear regressors over ens4.


def ens_mean_var(W, x):
    pred = jnp.einsum("mdk,bd->mbk", W, x)
    mu = pred.mean(0)
    return mu, jnp.mean(jnp.square(pred - mu), 0)


def ens_mv_mesh(bug):
    def f(W, x):
        pred = jnp.einsum("mdk,bd->mbk", W, x)
        n_dev = lax.psum(1, "ens")
        m = psum(pred.shape[0], "ens")
        tot = pmean(pred.sum(0), "ens") * (1 if bug == "pmean-not-rescaled" else n_dev)
        mu = tot / m
        sq = pmean(jnp.sum(jnp.square(pred - mu), 0), "ens") * n_dev
        return mu, sq / (m if bug != "var-over-local-members" else pred.shape[0])
    return f


C.smap("s.ensemble_mean_var_pmean_times_size.ens4", {"ens": 4}, ens_mv_mesh, (P("ens"), P()), (P(), P()),
       ens_mean_var, (R(8, 6, 3), R(5, 6)),
       bugs=[("pmean-not-rescaled", ["wrong-scale"]), ("var-over-local-members", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 21. PBT "copy the best everywhere": the best score by pmax, the best
#     member's weights by a psum of the weights masked with score == best
#     (every device wants the same source here), one member per device.


def copy_best(w, lr, score):
    b = jnp.argmax(score)
    return jnp.broadcast_to(w[b], w.shape), jnp.broadcast_to(lr[b], lr.shape)


def copy_best_mesh(bug):
    def f(w, lr, score):
        best = (pmin if bug == "pmin-not-pmax" else pmax)(score, "pop")
        hit = (score == best).astype(w.dtype)
        wb = psum(w * hit[:, None, None], "pop")
        lb = lr if bug == "lr-not-copied" else psum(lr * hit, "pop")
        return wb, lb
    return f


pmin = lax.pmin
C.smap("s.pbt_copy_best_pmax_mask_psum.pop8", {"pop": 8}, copy_best_mesh, (P("pop"),) * 3, (P("pop"), P("pop")),
       copy_best, (R(8, 5, 3), np.exp(R(8) - 3.0), R(8)),
       bugs=[("pmin-not-pmax", ["wrong-collective-op"]), ("lr-not-copied", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 22. snapshot ensemble in log space: log of the mean probability over
#     snapshots as a log-mean-exp over the sharded snapshot axis (pmax, psum
#     of exp), the ensemble NLL of the labels, batch replicated.


def snap_logmeanexp(w, x, lab):
    lp = jax.nn.log_softmax(jnp.einsum("bd,sdk->sbk", x, w), -1)
    lme = jax.nn.logsumexp(lp, 0) - np.log(w.shape[0])
    return lme, -jnp.mean(jnp.take_along_axis(lme, lab[:, None], 1))


def snap_lme_mesh(bug):
    def f(w, x, lab):
        lp = jax.nn.log_softmax(jnp.einsum("bd,sdk->sbk", x, w), -1)
        mx = jnp.max(lp, 0) if bug == "local-max-only" else pmax(jnp.max(lp, 0), "snap")
        se = psum(jnp.sum(jnp.exp(lp - mx), 0), "snap")
        lme = mx + jnp.log(se) - np.log(w.shape[0] * (1 if bug == "local-snapshot-count" else 4))
        return lme, -jnp.mean(jnp.take_along_axis(lme, lab[:, None], 1))
    return f


C.smap("s.snapshot_log_mean_exp_over_snap.snap4", {"snap": 4}, snap_lme_mesh, (P("snap"), P(), P()), (P(), P()),
       snap_logmeanexp, (R(8, 6, 5), R(7, 6), I(0, 5, 7)),
       bugs=[("local-max-only", ["missing-collective"]), ("local-snapshot-count", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 23. ranks of the whole population as a psum over pop of per-device
#     comparison counts (each device compares its members against all
#     gathered fitnesses), then the centered ranks of the local members.


def centered_rank_update(theta, eps, A):
    f = -jnp.sum(jnp.square(jnp.tanh((theta + 0.1 * eps) @ A)), -1)
    return centered_ranks(f) @ eps / (eps.shape[0] * 0.1)


def cnt_psum_mesh(bug):
    def f(theta, eps, A):
        nl = eps.shape[0]
        me = idx("pop")
        fl = -jnp.sum(jnp.square(jnp.tanh((theta + 0.1 * eps) @ A)), -1)
        F = lax.all_gather(fl, "pop", tiled=True)
        cnt = jnp.sum((fl[:, None] < F[None, :]).astype(jnp.int32), 0)  # members of mine below each
        rk_all = psum(cnt, "pop")
        off = 0 if bug == "local-slice-at-0" else me * nl
        rk = lax.dynamic_slice_in_dim(rk_all, off, nl)
        n = F.shape[0]
        u = rk.astype(jnp.float32) / (n - 1) - 0.5
        return psum(u @ eps, "pop") / (n * 0.1)
    return f


C.smap("s.es_ranks_psum_of_comparison_counts.pop4", {"pop": 4}, cnt_psum_mesh, (P(), P("pop"), P()), P(),
       centered_rank_update, (R(6, scale=0.5), R(16, 6), R(6, 4)),
       bugs=[("local-slice-at-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 24. ES on a parameter vector sharded over tp (pop2 x tp4): theta and the
#     noise's parameter dim over tp, the fitness's matvec psum'd over tp,
#     ranks over pop, the estimate psum'd over pop and left tp-sharded.


def es_ptp(theta, eps, A, b):
    f = -jnp.sum(jnp.square((theta + 0.05 * eps) @ A.T - b), -1)
    return theta + 0.3 * centered_ranks(f) @ eps / (eps.shape[0] * 0.05)


def es_ptp_mesh(bug):
    def f(theta, eps, A, b):
        nl = eps.shape[0]
        me = idx("pop")
        part = (theta + 0.05 * eps) @ A.T
        full = part if bug == "fitness-not-psummed-over-tp" else psum(part, "tp")
        fl = -jnp.sum(jnp.square(full - b), -1)
        u = lax.dynamic_slice_in_dim(centered_ranks(lax.all_gather(fl, "pop", tiled=True)), me * nl, nl)
        return theta + 0.3 * psum(u @ eps, "pop") / (2 * nl * 0.05)
    return f


C.smap("s.es_param_sharded_tp_pop.pop2xtp4", {"pop": 2, "tp": 4}, es_ptp_mesh,
       (P("tp"), P("pop", "tp"), P(None, "tp"), P()), P("tp"), es_ptp,
       (R(16, scale=0.3), R(8, 16), R(5, 16, scale=0.5), R(5)),
       bugs=[("fitness-not-psummed-over-tp", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 25. members sharded over two mesh axes at once (P(("ens", "dp")), 8
#     members, one per device): each member's dropout-style noise mask
#     regenerated from fold_in(key, global member id) with the id from both
#     axis indices, the masked members' predictions averaged.


def member_mask(key, i):
    return jax.random.bernoulli(jax.random.fold_in(key, i), 0.7, (12,)).astype(jnp.float32)


def masked_ens(W, key, x):
    masks = jax.vmap(lambda i: member_mask(key, i))(jnp.arange(W.shape[0]))
    h = jax.nn.relu(jnp.einsum("bd,mdh->mbh", x, W)) * masks[:, None, :] / 0.7
    return h.sum(-1).mean(0)


def masked_ens_mesh(bug):
    def f(W, key, x):
        if bug == "member-id-axes-swapped":
            gid = idx("dp") * 2 + idx("ens")
        else:
            gid = idx("ens") * 4 + idx("dp")
        mask = member_mask(key, gid)
        h = jax.nn.relu(jnp.einsum("bd,mdh->mbh", x, W)) * mask[None, None, :] / 0.7
        return psum(h.sum(-1).sum(0), ("ens", "dp")) / 8
    return f


C.smap("s.ensemble_two_axis_members_foldin_masks.ens2xdp4", {"ens": 2, "dp": 4}, masked_ens_mesh,
       (P(("ens", "dp")), P(), P()), P(), masked_ens, (R(8, 6, 12), np.array([7, 60], np.uint32), R(5, 6)),
       bugs=[("member-id-axes-swapped", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. the ES step of 1., noise over pop8.
C.gspmd("g.openai_es_antithetic_step.pop8", {"pop": 8}, (P(), P(), P(), P(), P("pop"), P(), P()),
        (P(), P(), P(), P(), P()), es_step, ARGS1)

# 11. the CMA-ES update of 3., candidates over pop4.
C.gspmd("g.cmaes_update.pop4", {"pop": 4}, (P(), P(), P(), P(), P(), P("pop")), (P(), P(), P()), cma_update, ARGS3)

# 12. the BatchEnsemble step of 4.
C.gspmd("g.batchensemble_step.ens2xdp4", {"ens": 2, "dp": 4}, (SPEC4, SS4, P("dp"), P("dp")), (SPEC4, SS4, P()),
        be_step, (P4, S4, R(B4, DI4), I(0, NC4, B4)))


# 13. a uniform soup of 8 members over ens4 evaluated on val data over dp2.
def uniform_soup(w1, b1, w2, xv, lv):
    s1, sb, s2 = (jnp.mean(t, 0) for t in (w1, b1, w2))
    return s1, sb, s2, val_loss_sum(s1, sb, s2, xv, lv) / NV5


C.gspmd("g.uniform_soup_eval.ens4xdp2", {"ens": 4, "dp": 2}, (P("ens"), P("ens"), P("ens"), P("dp"), P("dp")),
        (P(), P(), P(), P()), uniform_soup, ARGS5)


# 14. PBT exploit with jnp.take of the stacked population.
def pbt_take(w, mom, lr, score, coin):
    order = jnp.argsort(-score)  # best first
    rk = jnp.argsort(order)      # 0 = best
    src = jnp.where(rk >= N6 - 2, order[rk - (N6 - 2)], jnp.arange(N6))
    lr2 = jnp.where(rk >= N6 - 2, jnp.take(lr, src) * jnp.where(coin, 1.25, 0.8), lr)
    return jnp.take(w, src, 0), jnp.take(mom, src, 0), lr2


C.gspmd("g.pbt_exploit_take.pop8", {"pop": 8}, (P("pop"),) * 5, (P("pop"),) * 3, pbt_take,
        (R(N6, D6, H6), R(N6, D6, H6, scale=0.1), np.exp(R(N6) - 4.0), R(N6), rng.random(N6) < 0.5))

# 15. a deep ensemble of 8 MLPs with vmap(value_and_grad) and optax.adamw.
OPT15 = optax.adamw(3e-3, weight_decay=1e-2)


def ens_step(p, st, x, lab):
    def loss(pm):
        lg = mlp(pm["w1"], pm["b1"], pm["w2"], x)
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(lg, lab))
    l, g = jax.vmap(jax.value_and_grad(loss))(p)
    u, st = jax.vmap(OPT15.update)(g, st, p)
    return optax.apply_updates(p, u), st, l


P15 = {"w1": ARGS5[0], "b1": ARGS5[1], "w2": ARGS5[2]}
S15 = jax.tree.map(np.asarray, jax.vmap(OPT15.init)(P15))
SPEC15 = {k: P("ens") for k in P15}
SS15 = jax.tree.map(lambda a: P("ens") if np.ndim(a) >= 1 else P(), S15)
C.gspmd("g.deep_ensemble_vmap_adamw.ens4xdp2", {"ens": 4, "dp": 2}, (SPEC15, SS15, P("dp"), P("dp")),
        (SPEC15, SS15, P("ens")), ens_step, (P15, S15, R(16, D5), I(0, K5, 16)))

# 16. the parameter-sharded ES step of 24. with the noise over (pop, tp).
C.gspmd("g.es_param_sharded.pop2xtp4", {"pop": 2, "tp": 4}, (P("tp"), P("pop", "tp"), P(None, "tp"), P()), P("tp"),
        es_ptp, (R(16, scale=0.3), R(8, 16), R(5, 16, scale=0.5), R(5)))

C.finish()
