"""samples/fresh25: a twenty-fifth batch of programs as a user writes them,
on the theme of classical machine-learning algorithms on data sharded over
devices, none of them an idiom of samples/fresh .. fresh24, probe, train or
wild.
shard_map families: 1. k-means (Lloyd) in a lax.fori_loop, assignments
local (argmin, ties to the lower index), centroid sums, counts and the
inertia psum'd, an empty cluster keeping its old centroid; 2. PCA from the
covariance of bf16 data, the mean and the f32 scatter matrix psum'd over
dp, the leading eigenpair by 30 power iterations (fori_loop) on the small
replicated matrix; 3. power iteration without the covariance on a 2 x 4
mesh (rows over dp, features over tp: X v psum'd over tp, X^T u psum'd
over dp, the norm psum'd over tp); 4. logistic regression by Newton's
method (5 steps in a fori_loop, gradient and Hessian psum'd, the small
system solved by jnp.linalg.solve on every device); 5. ridge regression on
random Fourier (RBF) features with rows over the tuple (dp, sp), the
feature-space normal equations psum'd over both axes, the ridge term added
once after the psum; 6. Gaussian-process regression with the kernel's rows
sharded (training points all_gathered, the length scale from the mean
squared distance of all pairs, the noise on the diagonal at the device's
row offset, the rows all_gathered for a Cholesky solve, the predictive
mean as a psum of the local test-kernel columns times the dual
coefficients sliced at the device's offset, the test kernel all_gathered
for the variance); 7. k-nearest-neighbour
classification with reference points over dp (local lax.top_k with global
indices, all_gather, a second top_k, labels all_gathered and a majority
vote by one_hot sums); 8. Gaussian naive Bayes (class counts, means and
variances psum'd, log posteriors of replicated test points); 9. EM for a
diagonal Gaussian mixture (4 iterations in a fori_loop, responsibilities
local, N_k, the first moments and the centred second moments psum'd, the
mean log-likelihood psum'd / N); 10. t-SNE affinities and gradient with
rows over sp (points all_gathered, conditional affinities normalised per
row, symmetrised with the columns of the all_gathered matrix at the
device's offset, the Student-t normaliser Z psum'd over all pairs, KL and
the row gradients); 11. quantiles from a histogram over dp8 (range by
pmin / pmax, 32 bin counts psum'd, the CDF, the quantile interpolated in
its bin); 12. multinomial naive Bayes on a dp x tp mesh (documents over
dp, vocabulary over tp: class-word counts psum'd over dp, the per-class
word total psum'd over tp for Laplace smoothing, test scores psum'd over
tp).
Under GSPMD (correct programs): Lloyd k-means on dp8, multinomial logistic
regression trained by 3 optax.adam steps with the classes over tp and the
batch over dp, a Gaussian-process posterior with the kernel rows
constrained over sp, a t-SNE step (jax.grad of the KL, optax.sgd with
momentum, embedding rows over sp8), and EM for a Gaussian mixture with
the data over dp4.
Left out, as idioms of earlier batches: ridge regression by recursive
doubling of the normal equations and reduce-scattered histograms
(fresh13: here RFF features on a tuple of axes and quantiles from an
all-reduced histogram), a bare kNN top_k and distributed top-k (fresh6,
fresh13: here with a label vote), PageRank power iteration (fresh17: here
PCA).
Correct programs are deterministic: the k-means and GMM data are well
separated clusters, kNN reference points are random floats (no tied
distances), the power iterations start from a seeded vector.
Replaced for its numerics: a first-draft GP bug (the noise diagonal at
offset 0) made the kernel matrix indefinite, so the Cholesky gave NaN,
which "numerics" (a max that skips NaN) shows as 0; it became the dual
coefficients sliced at offset 0.
Bug variants are what a careless parallelisation of these algorithms
writes: counts not psum'd or pmean'd where summed, a mean or variance
from the local shard, a scatter matrix psum'd in bf16, a normalisation by
the local size, a norm not psum'd, a psum over the wrong axis or over one
axis of two, the Hessian not reduced, a gradient pmean'd, a ridge term
inside the psum, dual coefficients or a symmetrising column block sliced
at offset 0, a smoothing total over the local vocabulary, top-k without the global index offset or without the global
merge, a normaliser Z from the local rows, a histogram range from the
local shard.
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh25.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh25.sh)
from fresh_lib import Corpus, seeded  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh25.py"
C = Corpus("samples/fresh25", SCRIPT, "samples/gen/run_fresh25.sh", sys.argv[1:])
rng, R, I = seeded(2525)
psum, pmax, pmin, pmean, idx = lax.psum, lax.pmax, lax.pmin, lax.pmean, lax.axis_index


def sqdist(a, b):
    return jnp.sum(jnp.square(a[:, None, :] - b[None, :, :]), -1)


def blobs(n, centers, scale):
    """n points around the rows of centers (assigned round-robin)."""
    centers = np.asarray(centers, np.float32)
    lab = np.arange(n) % len(centers)
    rng.shuffle(lab)
    return (centers[lab] + R(n, centers.shape[1], scale=scale)).astype(np.float32), lab.astype(np.int32)


# ---------------------------------------------------------------------------
# 1. k-means (Lloyd), 3 iterations in a fori_loop: points over dp, centroids
#    replicated; assignments local, sums / counts / inertia psum'd.
KM_K = 4
KM_CENT = [[-4.0, -4.0], [4.0, -4.0], [-4.0, 4.0], [4.0, 4.0]]


def kmeans(x, c0):
    def step(_, c):
        a = jnp.argmin(sqdist(x, c), 1)
        oh = jax.nn.one_hot(a, KM_K, dtype=x.dtype)
        s, n = oh.T @ x, oh.sum(0)
        return jnp.where(n[:, None] > 0, s / jnp.maximum(n, 1.0)[:, None], c)
    c = lax.fori_loop(0, 3, step, c0)
    return c, jnp.sum(jnp.min(sqdist(x, c), 1))


def kmeans_smap(bug):
    def f(x, c0):
        def step(_, c):
            a = jnp.argmin(sqdist(x, c), 1)
            oh = jax.nn.one_hot(a, KM_K, dtype=x.dtype)
            s = psum(oh.T @ x, "dp")
            if bug == "counts-local":
                n = oh.sum(0)
            elif bug == "counts-pmean":
                n = pmean(oh.sum(0), "dp")
            else:
                n = psum(oh.sum(0), "dp")
            return jnp.where(n[:, None] > 0, s / jnp.maximum(n, 1.0)[:, None], c)
        c = lax.fori_loop(0, 3, step, c0)
        return c, psum(jnp.sum(jnp.min(sqdist(x, c), 1)), "dp")
    return f


km_x, _ = blobs(64, KM_CENT, 1.0)
km_c0 = (np.asarray(KM_CENT, np.float32) * 0.5 + R(KM_K, 2, scale=0.5)).astype(np.float32)
C.smap("s.kmeans_lloyd_fori.dp4", {"dp": 4}, kmeans_smap, (P("dp"), P()), (P(), P()), kmeans, (km_x, km_c0),
       bugs=[("counts-local", ["missing-all-reduce"]), ("counts-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 2. PCA from the covariance of bf16 data: mean and f32 scatter matrix psum'd
#    over dp, leading eigenpair by 30 power iterations on the replicated
#    8 x 8 matrix (sign fixed by the first component).
def power_iter(cov, v0, n=30):
    v = lax.fori_loop(0, n, lambda _, v: (cov @ v) / jnp.linalg.norm(cov @ v), v0)
    v = v * jnp.sign(v[0])
    return v @ cov @ v, v


def pca_cov(x, v0):
    xf = x.astype(jnp.float32)
    xc = xf - xf.mean(0)
    cov = jnp.einsum("nd,ne->de", xc, xc) / (x.shape[0] - 1)
    return power_iter(cov, v0)


def pca_cov_smap(bug):
    def f(x, v0):
        n_loc = x.shape[0]
        n = psum(n_loc, "dp")
        xf = x.astype(jnp.float32)
        mean = xf.mean(0) if bug == "mean-local" else psum(xf.sum(0), "dp") / n
        xc = xf - mean
        sc = jnp.einsum("nd,ne->de", xc, xc)
        if bug == "cov-psum-bf16":
            sc = psum(sc.astype(jnp.bfloat16), "dp").astype(jnp.float32)
        else:
            sc = psum(sc, "dp")
        cov = sc / ((n_loc if bug == "cov-local-n" else n) - 1)
        return power_iter(cov, v0)
    return f


pca_w = R(8, 8) * np.linspace(2.0, 0.3, 8, dtype=np.float32)[:, None]
pca_x = (R(64, 8) @ pca_w + 1.5).astype(jnp.bfloat16)
C.smap("s.pca_cov_bf16_power_iter.dp4", {"dp": 4}, pca_cov_smap, (P("dp"), P()), (P(), P()), pca_cov,
       (pca_x, R(8)),
       bugs=[("mean-local", ["missing-all-reduce"]), ("cov-psum-bf16", ["dtype-precision"]),
             ("cov-local-n", ["numerics"])])


# ---------------------------------------------------------------------------
# 3. power iteration without the covariance, X over (dp rows, tp features):
#    u = X v psum'd over tp, w = X^T u psum'd over dp, norm psum'd over tp.
def power_matvec(x, v0):
    def step(_, c):
        v, _ = c
        w = x.T @ (x @ v)
        nrm = jnp.linalg.norm(w)
        return w / nrm, nrm
    return lax.fori_loop(0, 20, step, (v0, jnp.float32(0.0)))


def power_matvec_smap(bug):
    def f(x, v0):
        def step(_, c):
            v, _ = c
            u = psum(x @ v, "dp" if bug == "matvec-psum-dp" else "tp")
            w = psum(x.T @ u, "dp")
            ss = jnp.sum(w * w)
            nrm = jnp.sqrt(ss if bug == "norm-local" else psum(ss, "tp"))
            return w / nrm, nrm
        return lax.fori_loop(0, 20, step, (v0, jnp.float32(0.0)))
    return f


pm_x = (R(32, 16) * np.linspace(1.5, 0.2, 16, dtype=np.float32)[None, :]).astype(np.float32)
C.smap("s.power_iter_matvec_2d.dp2xtp4", {"dp": 2, "tp": 4}, power_matvec_smap, (P("dp", "tp"), P("tp")),
       (P("tp"), P()), power_matvec, (pm_x, R(16)),
       bugs=[("norm-local", ["missing-all-reduce"]), ("matvec-psum-dp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 4. logistic regression by Newton's method: 5 steps in a fori_loop, the
#    gradient and the Hessian psum'd over dp, jnp.linalg.solve everywhere.
LR_LAM = 0.1


def newton_logreg(x, y):
    def step(_, w):
        p = jax.nn.sigmoid(x @ w)
        g = x.T @ (p - y) + LR_LAM * w
        h = (x * (p * (1 - p))[:, None]).T @ x + LR_LAM * jnp.eye(x.shape[1])
        return w - jnp.linalg.solve(h, g)
    return lax.fori_loop(0, 5, step, jnp.zeros(x.shape[1], x.dtype))


def newton_smap(bug):
    def f(x, y):
        def step(_, w):
            p = jax.nn.sigmoid(x @ w)
            gl = x.T @ (p - y)
            g = (pmean(gl, "dp") if bug == "grad-pmean" else psum(gl, "dp")) + LR_LAM * w
            hl = (x * (p * (1 - p))[:, None]).T @ x
            h = (hl if bug == "hessian-local" else psum(hl, "dp")) + LR_LAM * jnp.eye(x.shape[1])
            return w - jnp.linalg.solve(h, g)
        return lax.fori_loop(0, 5, step, jnp.zeros(x.shape[1], x.dtype))
    return f


lr_x = R(64, 5)
lr_y = ((lr_x @ np.array([1.0, -2.0, 0.5, 0.0, 1.0], np.float32) + R(64)) > 0).astype(np.float32)
C.smap("s.logreg_newton_fori.dp4", {"dp": 4}, newton_smap, (P("dp"), P("dp")), P(), newton_logreg, (lr_x, lr_y),
       bugs=[("hessian-local", ["missing-all-reduce"]), ("grad-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 5. ridge regression on random Fourier features of an RBF kernel, rows over
#    the tuple (dp, sp): Z^T Z and Z^T y psum'd over both axes, lambda I
#    added once after the psum.
RF_LAM = 0.5


def rff(x, w, b):
    return jnp.sqrt(2.0 / w.shape[1]) * jnp.cos(x @ w + b)


def rff_ridge(x, y, w, b):
    z = rff(x, w, b)
    a = z.T @ z + RF_LAM * jnp.eye(w.shape[1])
    return jnp.linalg.solve(a, z.T @ y)


def rff_smap(bug):
    def f(x, y, w, b):
        z = rff(x, w, b)
        axes = "dp" if bug == "psum-one-axis" else ("dp", "sp")
        if bug == "lam-inside-psum":
            a = psum(z.T @ z + RF_LAM * jnp.eye(w.shape[1]), axes)
        else:
            a = psum(z.T @ z, axes) + RF_LAM * jnp.eye(w.shape[1])
        return jnp.linalg.solve(a, psum(z.T @ y, axes))
    return f


rf_x = R(64, 4)
rf_y = (np.sin(rf_x[:, 0]) + 0.5 * rf_x[:, 1] * rf_x[:, 2] + R(64, scale=0.1)).astype(np.float32)
C.smap("s.rff_ridge_tuple_axes.dp2xsp4", {"dp": 2, "sp": 4}, rff_smap, (P(("dp", "sp")), P(("dp", "sp")), P(), P()),
       P(), rff_ridge, (rf_x, rf_y, R(4, 16), rng.uniform(0, 2 * np.pi, 16).astype(np.float32)),
       bugs=[("psum-one-axis", ["wrong-collective-group"]), ("lam-inside-psum", ["numerics"])])


# ---------------------------------------------------------------------------
# 6. Gaussian-process regression, the kernel's rows over sp: training points
#    all_gathered, length scale from the mean squared distance over all
#    pairs, noise on the diagonal at the row offset, rows all_gathered for a
#    Cholesky solve; predictive mean and variance at replicated test points.
GP_NOISE = 0.1


def gp_post(x, y, xt):
    d = sqdist(x, x)
    ls2 = jnp.mean(d)
    k = jnp.exp(-d / (2 * ls2)) + GP_NOISE * jnp.eye(x.shape[0])
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    ks = jnp.exp(-sqdist(xt, x) / (2 * ls2))
    v = jax.scipy.linalg.solve_triangular(chol, ks.T, lower=True)
    return ks @ alpha, 1.0 - jnp.sum(v * v, 0)


def gp_smap(bug):
    def f(x, y, xt):
        nl = x.shape[0]
        xa = lax.all_gather(x, "sp", tiled=True)
        n = xa.shape[0]
        d = sqdist(x, xa)
        ls2 = psum(jnp.sum(d), "sp") / ((nl * n) if bug == "ls-local-n" else (n * n))
        diag = ((jnp.arange(nl) + idx("sp") * nl)[:, None] == jnp.arange(n)[None, :]).astype(x.dtype)
        k = lax.all_gather(jnp.exp(-d / (2 * ls2)) + GP_NOISE * diag, "sp", tiled=True)
        chol = jnp.linalg.cholesky(k)
        alpha = jax.scipy.linalg.cho_solve((chol, True), lax.all_gather(y, "sp", tiled=True))
        ks_loc = jnp.exp(-sqdist(xt, x) / (2 * ls2))
        start = 0 if bug == "alpha-slice-offset0" else idx("sp") * nl
        mean = psum(ks_loc @ lax.dynamic_slice_in_dim(alpha, start, nl), "sp")
        ks = lax.all_gather(ks_loc, "sp", axis=1, tiled=True)
        v = jax.scipy.linalg.solve_triangular(chol, ks.T, lower=True)
        return mean, 1.0 - jnp.sum(v * v, 0)
    return f


# (A first-draft bug, the noise diagonal at offset 0, made K indefinite: the
# Cholesky gave NaN, which "numerics" does not show; replaced.)
gp_x = R(32, 2)
gp_y = (np.sin(2 * gp_x[:, 0]) * np.cos(gp_x[:, 1]) + R(32, scale=0.1)).astype(np.float32)
C.smap("s.gp_kernel_rows_cholesky.sp4", {"sp": 4}, gp_smap, (P("sp"), P("sp"), P()), (P(), P()), gp_post,
       (gp_x, gp_y, R(8, 2)),
       bugs=[("alpha-slice-offset0", ["wrong-offset"]), ("ls-local-n", ["numerics"])])


# ---------------------------------------------------------------------------
# 7. k-nearest-neighbour classification, reference points over dp: local
#    top_k of -distance with global indices, all_gather, a second top_k,
#    labels all_gathered, a majority vote by one_hot sums (ties: lower class).
KNN_K, KNN_C = 5, 3


def knn(q, ref, lab):
    negd, nn = lax.top_k(-sqdist(q, ref), KNN_K)
    votes = jax.nn.one_hot(lab[nn], KNN_C).sum(1)
    return jnp.argmax(votes, -1).astype(jnp.int32), -negd


def knn_smap(bug):
    def f(q, ref, lab):
        nl = ref.shape[0]
        negd, li = lax.top_k(-sqdist(q, ref), KNN_K)
        gi = li + (0 if bug == "index-no-offset" else idx("dp") * nl)
        if bug != "no-global-merge":
            allv = lax.all_gather(negd, "dp", axis=1, tiled=True)
            alli = lax.all_gather(gi, "dp", axis=1, tiled=True)
            negd, pos = lax.top_k(allv, KNN_K)
            gi = jnp.take_along_axis(alli, pos, 1)
        labs = lax.all_gather(lab, "dp", tiled=True)
        votes = jax.nn.one_hot(labs[gi], KNN_C).sum(1)
        return jnp.argmax(votes, -1).astype(jnp.int32), -negd
    return f


kn_ref, kn_lab = blobs(64, [[-1.5, 0, 0], [1.5, 0, 0], [0, 1.5, 0]], 1.2)
C.smap("s.knn_vote_global_topk.dp4", {"dp": 4}, knn_smap, (P(), P("dp"), P("dp")), (P(), P()), knn,
       (R(8, 3), kn_ref, kn_lab),
       bugs=[("no-global-merge", ["missing-collective"]), ("index-no-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 8. Gaussian naive Bayes: class counts, means and variances psum'd over dp,
#    log posteriors (unnormalised) of replicated test points.
NB_C = 3


def nb_logpost(cnt, mu, var, n, xt):
    ll = -0.5 * jnp.sum(jnp.log(2 * jnp.pi * var)[None] + jnp.square(xt[:, None] - mu[None]) / var[None], -1)
    return ll + jnp.log(cnt / n)[None]


def gnb(x, y, xt):
    oh = jax.nn.one_hot(y, NB_C, dtype=x.dtype)
    cnt = oh.sum(0)
    mu = (oh.T @ x) / cnt[:, None]
    var = (oh.T @ jnp.square(x - mu[y])) / cnt[:, None] + 1e-3
    return nb_logpost(cnt, mu, var, x.shape[0], xt)


def gnb_smap(bug):
    def f(x, y, xt):
        oh = jax.nn.one_hot(y, NB_C, dtype=x.dtype)
        cnt = pmean(oh.sum(0), "dp") if bug == "counts-pmean" else psum(oh.sum(0), "dp")
        mu = psum(oh.T @ x, "dp") / cnt[:, None]
        c = (oh.T @ x) / oh.sum(0)[:, None] if bug == "var-local-mean" else mu
        var = psum(oh.T @ jnp.square(x - c[y]), "dp") / cnt[:, None] + 1e-3
        return nb_logpost(cnt, mu, var, psum(x.shape[0], "dp"), xt)
    return f


nb_x, nb_y = blobs(64, [[-1, 0, 1, 0], [1, 1, 0, -1], [0, -1, -1, 1]], 1.0)
C.smap("s.gaussian_naive_bayes.dp4", {"dp": 4}, gnb_smap, (P("dp"), P("dp"), P()), P(), gnb,
       (nb_x, nb_y, R(8, 4)),
       bugs=[("counts-pmean", ["wrong-collective-op"]), ("var-local-mean", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 9. EM for a diagonal Gaussian mixture, 4 iterations in a fori_loop:
#    responsibilities local; N_k, first moments and centred second moments
#    psum'd over dp; the mean log-likelihood psum'd / N.
GM_K = 3


def gmm_loglik(x, mu, var, pi):
    lp = -0.5 * jnp.sum(jnp.log(2 * jnp.pi * var)[None] + jnp.square(x[:, None] - mu[None]) / var[None], -1)
    return lp + jnp.log(pi)[None]


def gmm_em(x, mu0, var0, pi0):
    def step(_, c):
        mu, var, pi = c
        r = jax.nn.softmax(gmm_loglik(x, mu, var, pi), -1)
        nk = r.sum(0)
        mu = (r.T @ x) / nk[:, None]
        var = jnp.einsum("nk,nkd->kd", r, jnp.square(x[:, None] - mu[None])) / nk[:, None] + 1e-3
        return mu, var, nk / x.shape[0]
    mu, var, pi = lax.fori_loop(0, 4, step, (mu0, var0, pi0))
    return mu, var, pi, jnp.mean(jax.nn.logsumexp(gmm_loglik(x, mu, var, pi), -1))


def gmm_smap(bug):
    def f(x, mu0, var0, pi0):
        n = psum(x.shape[0], "dp")

        def step(_, c):
            mu, var, pi = c
            r = jax.nn.softmax(gmm_loglik(x, mu, var, pi), -1)
            nk = r.sum(0) if bug == "nk-local" else psum(r.sum(0), "dp")
            mu = psum(r.T @ x, "dp") / nk[:, None]
            s2 = jnp.einsum("nk,nkd->kd", r, jnp.square(x[:, None] - mu[None]))
            s2 = pmean(s2, "dp") if bug == "var-pmean" else psum(s2, "dp")
            return mu, s2 / nk[:, None] + 1e-3, nk / n
        mu, var, pi = lax.fori_loop(0, 4, step, (mu0, var0, pi0))
        return mu, var, pi, psum(jnp.sum(jax.nn.logsumexp(gmm_loglik(x, mu, var, pi), -1)), "dp") / n
    return f


gm_x, _ = blobs(64, [[-3, 0], [3, 0], [0, 4]], 0.8)
gm_args = (gm_x, np.array([[-1, -1], [1, 0], [0, 1]], np.float32), np.ones((GM_K, 2), np.float32),
           np.full(GM_K, 1 / GM_K, np.float32))
C.smap("s.gmm_em_fori.dp4", {"dp": 4}, gmm_smap, (P("dp"), P(), P(), P()), (P(), P(), P(), P()), gmm_em, gm_args,
       bugs=[("nk-local", ["missing-all-reduce"]), ("var-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 10. t-SNE affinities and gradient, rows over sp: conditional affinities
#     exp(-beta_i d_ij) normalised per row, symmetrised with the columns of
#     the all_gathered matrix at the device's offset, Student-t kernel with
#     its normaliser Z psum'd over all pairs; KL(P || Q) and dKL / dY rows.
def tsne_pq(pc_rows, pc_cols_t, y_rows, y_all, offdiag, n):
    p = (pc_rows + pc_cols_t) / (2 * n)
    num = jnp.where(offdiag, 1.0 / (1.0 + sqdist(y_rows, y_all)), 0.0)
    return p, num


def tsne(x, y, beta):
    n = x.shape[0]
    off = ~jnp.eye(n, dtype=bool)
    pc = jnp.where(off, jnp.exp(-beta[:, None] * sqdist(x, x)), 0.0)
    pc = pc / pc.sum(1, keepdims=True)
    p, num = tsne_pq(pc, pc.T, y, y, off, n)
    q = num / num.sum()
    kl = jnp.sum(jnp.where(off, p * jnp.log(p / jnp.where(off, q, 1.0)), 0.0))
    grad = 4 * jnp.sum(((p - q) * num)[:, :, None] * (y[:, None] - y[None]), 1)
    return grad, kl


def tsne_smap(bug):
    def f(x, y, beta):
        nl = x.shape[0]
        xa = lax.all_gather(x, "sp", tiled=True)
        ya = lax.all_gather(y, "sp", tiled=True)
        n = xa.shape[0]
        start = 0 if bug == "sym-cols-offset0" else idx("sp") * nl
        off = (jnp.arange(nl)[:, None] + idx("sp") * nl) != jnp.arange(n)[None, :]
        pc = jnp.where(off, jnp.exp(-beta[:, None] * sqdist(x, xa)), 0.0)
        pc = pc / pc.sum(1, keepdims=True)
        pc_all = lax.all_gather(pc, "sp", tiled=True)
        pc_t = lax.dynamic_slice_in_dim(pc_all, start, nl, axis=1).T
        p, num = tsne_pq(pc, pc_t, y, ya, off, n)
        z = num.sum() if bug == "z-local" else psum(num.sum(), "sp")
        q = num / z
        kl = psum(jnp.sum(jnp.where(off, p * jnp.log(p / jnp.where(off, q, 1.0)), 0.0)), "sp")
        grad = 4 * jnp.sum(((p - q) * num)[:, :, None] * (y[:, None] - ya[None]), 1)
        return grad, kl
    return f


ts_args = (R(32, 6), R(32, 2), rng.uniform(0.2, 0.6, 32).astype(np.float32))
C.smap("s.tsne_affinity_grad_rows.sp4", {"sp": 4}, tsne_smap, (P("sp"), P("sp"), P("sp")), (P("sp"), P()), tsne,
       ts_args, bugs=[("sym-cols-offset0", ["wrong-offset"]), ("z-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 11. quantiles from a histogram over dp8: range by pmin / pmax, 32 bin
#     counts psum'd, the CDF normalised by the global count, each quantile
#     interpolated linearly inside the first bin whose CDF reaches it.
HB = 32
QS = np.array([0.1, 0.25, 0.5, 0.75, 0.9], np.float32)


def hist_quantiles(counts, lo, hi, n):
    cdf = jnp.cumsum(counts) / n
    b = jnp.searchsorted(cdf, QS)
    prev = jnp.where(b > 0, cdf[jnp.maximum(b - 1, 0)], 0.0)
    frac = (QS - prev) / (counts[b] / n)
    return lo + (b + frac) * (hi - lo) / HB


def bin_counts(x, lo, hi):
    bi = jnp.clip(jnp.floor((x - lo) / (hi - lo) * HB).astype(jnp.int32), 0, HB - 1)
    return jax.nn.one_hot(bi, HB, dtype=jnp.float32).sum(0)


def quantiles(x):
    lo, hi = x.min(), x.max()
    counts = bin_counts(x, lo, hi)
    return hist_quantiles(counts, lo, hi, x.shape[0]), counts


def quantiles_smap(bug):
    def f(x):
        if bug == "range-local":
            lo, hi = x.min(), x.max()
        else:
            lo, hi = pmin(x.min(), "dp"), pmax(x.max(), "dp")
        counts = psum(bin_counts(x, lo, hi), "dp")
        n = x.shape[0] if bug == "cdf-local-n" else psum(x.shape[0], "dp")
        return hist_quantiles(counts, lo, hi, n), counts
    return f


C.smap("s.hist_quantiles_pmin_pmax.dp8", {"dp": 8}, quantiles_smap, (P("dp"),), (P(), P()), quantiles,
       (np.concatenate([R(192), R(64, scale=0.5) + 3.0]).astype(np.float32),),
       bugs=[("range-local", ["missing-all-reduce"]), ("cdf-local-n", ["numerics"])])


# ---------------------------------------------------------------------------
# 12. multinomial naive Bayes on a dp x tp mesh: documents over dp, the
#     vocabulary over tp; class-word counts psum'd over dp, the per-class
#     word total psum'd over tp (Laplace smoothing), test scores psum'd over
#     tp plus the log prior.
MNB_C, MNB_A = 3, 1.0


def mnb(x, y, xt):
    oh = jax.nn.one_hot(y, MNB_C, dtype=x.dtype)
    fc = oh.T @ x
    logt = jnp.log(fc + MNB_A) - jnp.log(fc.sum(1, keepdims=True) + MNB_A * x.shape[1])
    return xt @ logt.T + jnp.log(oh.sum(0) / x.shape[0])


def mnb_smap(bug):
    def f(x, y, xt):
        oh = jax.nn.one_hot(y, MNB_C, dtype=x.dtype)
        fc = psum(oh.T @ x, "dp")
        tot = fc.sum(1, keepdims=True)
        tot = tot if bug == "vocab-total-local" else psum(tot, "tp")
        v = psum(x.shape[1], "tp")
        logt = jnp.log(fc + MNB_A) - jnp.log(tot + MNB_A * v)
        sc = psum(xt @ logt.T, "dp" if bug == "scores-psum-dp" else "tp")
        return sc + jnp.log(psum(oh.sum(0), "dp") / psum(x.shape[0], "dp"))
    return f


mnb_y = (np.arange(32) % MNB_C).astype(np.int32)
mnb_rate = rng.uniform(0.2, 3.0, (MNB_C, 16))
mnb_x = rng.poisson(mnb_rate[mnb_y]).astype(np.float32)
C.smap("s.multinomial_nb_vocab_tp.dp2xtp4", {"dp": 2, "tp": 4}, mnb_smap, (P("dp", "tp"), P("dp"), P(None, "tp")),
       P(), mnb, (mnb_x, mnb_y, rng.poisson(1.0, (8, 16)).astype(np.float32)),
       bugs=[("vocab-total-local", ["missing-all-reduce"]), ("scores-psum-dp", ["wrong-collective-group"])])


# ===========================================================================
# GSPMD
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


# 12. Lloyd k-means with the points over dp8.
km8_x, _ = blobs(128, KM_CENT, 1.0)
C.gspmd("g.kmeans_lloyd_fori.dp8", {"dp": 8}, (P("dp"), P()), (P(), P()), kmeans, (km8_x, km_c0))


# 13. multinomial logistic regression, 3 optax.adam steps: the classes of W
#     over tp, the batch over dp; the logits constrained to (dp, tp).
M_DT = {"dp": 4, "tp": 2}
SR_D, SR_C = 8, 6


def softmax_reg_adam(params, x, y):
    opt = optax.adam(0.1)

    def loss(p):
        logits = wsc(M_DT, x @ p["w"] + p["b"], "dp", "tp")
        return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y)) + 1e-3 * jnp.sum(p["w"] ** 2)
    st = opt.init(params)
    ls = []
    for _ in range(3):
        l, g = jax.value_and_grad(loss)(params)
        up, st = opt.update(g, st, params)
        params = optax.apply_updates(params, up)
        ls.append(l)
    return params, jnp.stack(ls)


sr_x = R(32, SR_D)
sr_y = np.argmax(sr_x @ R(SR_D, SR_C), -1).astype(np.int32)
C.gspmd("g.softmax_regression_adam.dp4xtp2", M_DT, ({"w": P(None, "tp"), "b": P("tp")}, P("dp"), P("dp")),
        ({"w": P(None, "tp"), "b": P("tp")}, P()), softmax_reg_adam,
        ({"w": R(SR_D, SR_C, scale=0.1), "b": np.zeros(SR_C, np.float32)}, sr_x, sr_y))


# 14. Gaussian-process posterior, training points over sp, the kernel's
#     rows constrained over sp before the Cholesky.
def gp_post_wsc(x, y, xt):
    d = wsc({"sp": 4}, sqdist(x, x), "sp")
    ls2 = jnp.mean(d)
    k = wsc({"sp": 4}, jnp.exp(-d / (2 * ls2)) + GP_NOISE * jnp.eye(x.shape[0]), "sp")
    chol = jnp.linalg.cholesky(k)
    alpha = jax.scipy.linalg.cho_solve((chol, True), y)
    ks = jnp.exp(-sqdist(xt, x) / (2 * ls2))
    v = jax.scipy.linalg.solve_triangular(chol, ks.T, lower=True)
    return ks @ alpha, 1.0 - jnp.sum(v * v, 0)


C.gspmd("g.gp_posterior_kernel_rows.sp4", {"sp": 4}, (P("sp"), P("sp"), P()), (P(), P()), gp_post_wsc,
        (gp_x, gp_y, R(8, 2)))


# 15. a t-SNE step: jax.grad of KL(P || Q) w.r.t. the embedding, 2 steps of
#     optax.sgd with momentum, embedding rows over sp8.
def tsne_sgd(x, y, beta):
    opt = optax.sgd(5.0, momentum=0.5)

    def kl(y):
        return tsne(x, y, beta)[1]
    st = opt.init(y)
    ls = []
    for _ in range(2):
        l, g = jax.value_and_grad(kl)(y)
        up, st = opt.update(g, st, y)
        y = wsc({"sp": 8}, optax.apply_updates(y, up), "sp")
        ls.append(l)
    return y, jnp.stack(ls)


C.gspmd("g.tsne_kl_grad_momentum.sp8", {"sp": 8}, (P("sp"), P("sp"), P("sp")), (P("sp"), P()), tsne_sgd, ts_args)


# 16. EM for the Gaussian mixture of 9., the points over dp4.
C.gspmd("g.gmm_em_fori.dp4", {"dp": 4}, (P("dp"), P(), P(), P()), (P(), P(), P(), P()), gmm_em, gm_args)

# ---------------------------------------------------------------------------
C.finish()
