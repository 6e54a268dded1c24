"""samples/fresh24: a 24th batch of programs as a user writes them, on the
theme of per-example gradients and robust / private training under data and
model parallelism, none of them an idiom of samples/fresh .. fresh22, probe,
train or wild.
shard_map families: 1. DP-SGD on dp4 -- per-example gradients by
jax.vmap(jax.grad), each clipped by its global norm over all leaves, summed,
psum'd, Gaussian noise from the step's key (the same on every device, no
device index folded in), divided by the global batch; 2. the same on a
Megatron MLP over dp2 x tp4 (check_vma=True): the logits psum'd over tp,
each example's squared norm psum'd over tp, noise drawn at the full shape
and sliced at the device's offset; the parameters pcast to varying over dp
before the vmap(grad) (an invariant parameter's gradient comes back psum'd
over dp, which would sum different examples); 3. ghost clipping of a linear
layer over a sequence -- per-example norms <x x^T, g g^T> from activations and
output gradients, the output-gradient Gram and the bias norm psum'd over tp,
the clipped gradient as x^T (c g); 4. prioritized-replay importance weights
(P_i by the psum'd sum of pr^a, (N P)^-b divided by the pmax'd maximum) in
an optax SGD-momentum step; 5. mixup with the global batch reversed (the
local block reversed and swapped with the mirror device by one ppermute);
6. CutMix with a global permutation given as an input (images and labels
all_gathered, the permutation sliced at the device's offset); 7. focal loss
with per-class alpha, classes over tp (lse by pmax / psum, the target logit
and its alpha picked in the device's range and psum'd); 8. a label-smoothed
head written as KL(q || softmax) in an SGD step, classes over tp
(check_vma=True, the loss pmean'd over dp inside the differentiated
function); 9. the gradient noise scale from the devices' gradients (pmean of
the small-batch squared norms against the squared norm of the pmean); 10.
per-coordinate variance of per-example gradients of a tp-sharded linear
layer (sums of g and g^2 psum'd over dp) and its trace psum'd over tp; 11.
m-sharpness SAM: each device ascends from its own gradient, no collective on
purpose, the descent gradient pmean'd (the baseline vmaps over the blocks);
12. optax.contrib.differentially_private_aggregate chained with optax.sgd,
built per step from the key, applied to per-example gradients all_gathered
over dp; 13. DP-SGD with per-example gradients in micro-batches by a
lax.scan over the local batch, noise added once after the psum; 14. bf16
per-example loss weights normalised by their sum over the global batch,
accumulated in f32.
GSPMD pairs (correct): DP-SGD with vmap(grad) on dp8, DP-SGD on the Megatron
MLP with the per-example gradients constrained to (dp, .., tp), ghost-clipping
norms with W's columns over tp, mixup by jnp.take of a global permutation in
an SGD step, a label-smoothed focal loss in an Adam step with classes over
tp, and the gradient noise scale by a vmap over batch blocks constrained
over dp.
Bug variants: noise per device (fold_in of the dp index), the local batch as
divisor, the local gradient sum clipped instead of each example, each tp
shard clipped by its own norm, the per-example norm psum'd over dp instead
of tp, noise drawn at the shard's shape, the Gram of the output gradients not
psum'd, the bias norm left out, the weight maximum or the probability sum
taken locally, gradients pmean'd instead of psum'd, a local flip or a shifted
ppermute as mixup partner, the permutation sliced at offset 0 or applied
within the local batch, target indices without the class offset, a local
log-sum-exp, eps divided by the local class count, the device's own
squared norm as the small-batch estimate, mean-of-squares and
square-of-mean swapped, the mean of local variances, a trace psum'd over dp,
the SAM ascent gradient pmean'd (plain SAM, not m-SAM), the descent gradient
not pmean'd, the optax DP aggregate applied to the local batch then pmean'd,
a micro-batch clipped as a whole, noise added before the psum, a weight sum
in bf16 or local only.
Randomness: every key is an input (a raw uint32 PRNGKey), the same on every
device; where a parameter is tp-sharded, its noise is drawn at the full shape
and sliced, so both programs draw the same numbers.
Replaced for their numerics: 2. first differentiated the dp-invariant
parameters (its "correct" pair was off by 1e-2: each device's per-example
gradients were psum'd over dp by the invariant parameter's transpose), now
they are pcast to varying first; 4.'s first bug divided by the local batch
size N in (N P)^-b, which the division by the maximum cancels exactly (0
difference), replaced by a probability sum taken locally. Nothing was
dropped. Every correct pair agrees with its baseline at rounding level (f32
within 5e-7), except 9., whose noise scale S is a difference of nearly equal
squared norms: 2.7e-5 on values near 35 (relative 8e-7).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh24.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh24.sh)
from fresh_lib import Corpus, seeded, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh24.py"
C = Corpus("samples/fresh24", SCRIPT, "samples/gen/run_fresh24.sh", sys.argv[1:])
rng, R, I = seeded(2424)
psum, pmax, pmean, idx = lax.psum, lax.pmax, lax.pmean, lax.axis_index


def key(n):
    """A raw uint32 PRNG key, as an input (the same on every device)."""
    return np.asarray(jax.random.PRNGKey(n))


def mlp(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def xent(logits, y):
    return -jnp.take_along_axis(jax.nn.log_softmax(logits), y[..., None], -1)[..., 0]


def ex_loss(p, x, y):
    """The loss of one example (x (D,), y ())."""
    return xent(mlp(p, x[None]), y[None])[0]


def sq_norms(g):
    """Per-example squared global norms of a tree of per-example gradients."""
    return sum(jnp.sum(jnp.square(l.reshape(l.shape[0], -1)), 1) for l in jax.tree.leaves(g))


def clip_sum(g, n2, c):
    f = jnp.minimum(1.0, c / (jnp.sqrt(n2) + 1e-6))
    return jax.tree.map(lambda l: jnp.tensordot(f, l, 1), g)


def gauss_like(k, t):
    leaves, tdef = jax.tree.flatten(t)
    ks = jax.random.split(k, len(leaves))
    return jax.tree.unflatten(tdef, [jax.random.normal(kk, l.shape, l.dtype) for kk, l in zip(ks, leaves)])


D, H, K, B = 8, 16, 4, 16
CLIP, SIGMA, LR = 0.6, 0.8, 0.5
mp = {"w1": R(D, H, scale=0.6), "b1": R(H, scale=0.3), "w2": R(H, K, scale=0.6)}
mrep = {k: P() for k in mp}


# ---------------------------------------------------------------------------
# 1. DP-SGD: per-example gradients by jax.vmap(jax.grad), each clipped by its
#    global norm over all leaves, summed, psum'd over dp, Gaussian noise from
#    the step's key (the same on every device), divided by the global batch.
def dpsgd_ref(p, k, x, y):
    g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, x, y)
    s = clip_sum(g, sq_norms(g), CLIP)
    nz = gauss_like(k, p)
    return jax.tree.map(lambda w, a, z: w - LR * (a + SIGMA * CLIP * z) / x.shape[0], p, s, nz)


def dpsgd_dp(bug):
    def f(p, k, x, y):
        g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, x, y)
        if bug == "clip-local-sum":
            s = clip_sum(jax.tree.map(lambda l: l.sum(0, keepdims=True), g),
                         sq_norms(jax.tree.map(lambda l: l.sum(0, keepdims=True), g)), CLIP)
        else:
            s = clip_sum(g, sq_norms(g), CLIP)
        s = psum(s, "dp")
        kk = jax.random.fold_in(k, idx("dp")) if bug == "noise-per-device" else k
        nz = gauss_like(kk, p)
        nb = x.shape[0] if bug == "local-batch-divisor" else x.shape[0] * lax.axis_size("dp")
        return jax.tree.map(lambda w, a, z: w - LR * (a + SIGMA * CLIP * z) / nb, p, s, nz)
    return f


C.smap("s.dpsgd_vmap_clip_noise.dp4", {"dp": 4}, dpsgd_dp, (mrep, P(), P("dp"), P("dp")), mrep, dpsgd_ref,
       (mp, key(1), R(B, D), I(0, K, B)),
       bugs=[("noise-per-device", ["numerics"]), ("local-batch-divisor", ["numerics"]),
             ("clip-local-sum", ["numerics"])])


# ---------------------------------------------------------------------------
# 2. DP-SGD on a Megatron MLP (check_vma=True): w1 columns, b1 and w2 rows
#    over tp, the logits psum'd over tp; per-example gradients by vmap(grad)
#    inside the shard_map; each example's squared norm psum'd over tp (every
#    leaf is a tp shard); noise drawn at the full shape and sliced at the
#    device's offset; batch over dp.
mt_specs = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None)}


def mt_train(bug):
    def f(p, k, x, y):
        def lossx(p, x, y):
            return xent(psum(jnp.tanh(x[None] @ p["w1"] + p["b1"]) @ p["w2"], "tp"), y[None])[0]
        # p is invariant over dp: its gradient would come back psum'd over dp
        # (summing different examples); per-example gradients need it varying.
        pv = jax.tree.map(lambda w: lax.pcast(w, "dp", to="varying"), p)
        g = jax.vmap(jax.grad(lossx), (None, 0, 0))(pv, x, y)
        n2 = sq_norms(g)
        if bug == "norm-psum-over-dp":
            n2 = psum(n2, "dp")
        elif bug != "clip-per-shard":
            n2 = psum(n2, "tp")
        s = psum(clip_sum(g, n2, CLIP), "dp")
        hl, t = p["w1"].shape[1], idx("tp")
        full = {"w1": (D, H), "b1": (H,), "w2": (H, K)}
        ks = dict(zip(["b1", "w1", "w2"], jax.random.split(k, 3)))
        if bug == "noise-at-shard-shape":
            nz = {n: jax.random.normal(ks[n], p[n].shape) for n in p}
        else:
            nz = {n: lax.dynamic_slice_in_dim(jax.random.normal(ks[n], full[n]), t * hl, hl, 1 if n == "w1" else 0)
                  for n in p}
        nb = x.shape[0] * lax.axis_size("dp")
        return {n: p[n] - LR * (s[n] + SIGMA * CLIP * nz[n]) / nb for n in p}
    return f


C.smap("s.dpsgd_megatron_tp_norm_vma.dp2xtp4", {"dp": 2, "tp": 4}, mt_train, (mt_specs, P(), P("dp"), P("dp")),
       mt_specs, dpsgd_ref, (mp, key(2), R(B, D), I(0, K, B)), check_vma=True,
       bugs=[("clip-per-shard", ["missing-all-reduce"]), ("norm-psum-over-dp", ["wrong-collective-group"]),
             ("noise-at-shard-shape", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 3. ghost clipping of a linear layer over a sequence: per-example norms from
#    the activations and the output gradients (||x_i^T g_i||^2 =
#    <x_i x_i^T, g_i g_i^T>), the output gradient Gram psum'd over tp (W's
#    columns and b over tp), the clipped gradient as x^T (c * g); batch over dp.
G_T, G_D, G_O, G_B = 6, 8, 16, 8
G_CLIP = 1.5


def lin_ex_loss(p, x, y):
    return 0.5 * jnp.mean(jnp.sum(jnp.square(x @ p["w"] + p["b"] - y), -1))


def ghost_ref(p, x, y):
    g = jax.vmap(jax.grad(lin_ex_loss), (None, 0, 0))(p, x, y)
    s = clip_sum(g, sq_norms(g), G_CLIP)
    return jax.tree.map(lambda w, a: w - 0.3 * a / x.shape[0], p, s)


def ghost_tp(bug):
    def f(p, x, y):
        out = x @ p["w"] + p["b"]
        go = jax.grad(lambda o: 0.5 * jnp.sum(jnp.mean(jnp.sum(jnp.square(o - y), -1), -1)))(out)
        gx = jnp.einsum("bsd,btd->bst", x, x)
        gg = jnp.einsum("bso,bto->bst", go, go)
        gb = go.sum(1)
        nb2 = jnp.sum(gb * gb, -1)
        if bug != "gram-no-psum":
            gg = psum(gg, "tp")
        if bug != "bias-norm-omitted":
            nb2 = psum(nb2, "tp")
        n2 = jnp.sum(gx * gg, (1, 2)) + (0.0 if bug == "bias-norm-omitted" else nb2)
        c = jnp.minimum(1.0, G_CLIP / (jnp.sqrt(n2) + 1e-6))
        gw = psum(jnp.einsum("btd,bto->do", x, c[:, None, None] * go), "dp")
        gbias = psum(jnp.einsum("b,bo->o", c, gb), "dp")
        nb = x.shape[0] * lax.axis_size("dp")
        return {"w": p["w"] - 0.3 * gw / nb, "b": p["b"] - 0.3 * gbias / nb}
    return f


gh_p = {"w": R(G_D, G_O, scale=0.4), "b": R(G_O, scale=0.2)}
gh_specs = {"w": P(None, "tp"), "b": P("tp")}
gh_args = (gh_p, R(G_B, G_T, G_D), R(G_B, G_T, G_O))
C.smap("s.ghost_clip_gram_norms_tp.dp2xtp4", {"dp": 2, "tp": 4}, ghost_tp,
       (gh_specs, P("dp"), P("dp", None, "tp")), gh_specs, ghost_ref, gh_args,
       bugs=[("gram-no-psum", ["missing-all-reduce"]), ("bias-norm-omitted", ["numerics"])])


# ---------------------------------------------------------------------------
# 4. prioritized-replay importance weights: P_i = pr_i^a / sum pr^a over the
#    global batch, w_i = (N P_i)^-b / max w (pmax), loss sum w_i l_i / N;
#    gradients psum'd over dp; optax SGD with momentum.
PA, PB = 0.6, 0.4
per_opt = optax.sgd(0.3, momentum=0.9)


def per_ref(p, st, pr, x, y):
    pa = pr ** PA
    w = (x.shape[0] * pa / jnp.sum(pa)) ** -PB
    w = w / jnp.max(w)
    g = jax.grad(lambda p: jnp.sum(w * xent(mlp(p, x), y)) / x.shape[0])(p)
    u, st = per_opt.update(g, st, p)
    return optax.apply_updates(p, u), st


def per_dp(bug):
    def f(p, st, pr, x, y):
        pa = pr ** PA
        n = x.shape[0] * lax.axis_size("dp")
        w = (n * pa / (jnp.sum(pa) if bug == "prob-sum-local" else psum(jnp.sum(pa), "dp"))) ** -PB
        w = w / (jnp.max(w) if bug == "max-weight-local" else pmax(jnp.max(w), "dp"))
        g = jax.grad(lambda p: jnp.sum(w * xent(mlp(p, x), y)) / (x.shape[0] * lax.axis_size("dp")))(p)
        g = (pmean if bug == "grads-pmean" else psum)(g, "dp")
        u, st = per_opt.update(g, st, p)
        return optax.apply_updates(p, u), st
    return f


per_st = np_tree(per_opt.init(mp))
per_ss = state_specs(per_st, mrep)
C.smap("s.per_importance_weights_sgdm.dp4", {"dp": 4}, per_dp, (mrep, per_ss, P("dp"), P("dp"), P("dp")),
       (mrep, per_ss), per_ref,
       (mp, per_st, np.abs(R(B)) + 0.1, R(B, D), I(0, K, B)),
       bugs=[("max-weight-local", ["missing-all-reduce"]), ("prob-sum-local", ["missing-all-reduce"]),
             ("grads-pmean", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 5. mixup with the global batch reversed (example i with B-1-i): the local
#    block reversed and swapped with the mirror device by one ppermute;
#    per-example mixing weights; soft-label cross-entropy in an SGD step.
def soft_xent(logits, q):
    return -jnp.sum(q * jax.nn.log_softmax(logits), -1)


def mix_ref(p, lam, x, y):
    q = jax.nn.one_hot(y, K)
    xm = lam[:, None] * x + (1 - lam[:, None]) * x[::-1]
    qm = lam[:, None] * q + (1 - lam[:, None]) * q[::-1]
    lv, g = jax.value_and_grad(lambda p: jnp.mean(soft_xent(mlp(p, xm), qm)))(p)
    return jax.tree.map(lambda w, d: w - 0.5 * d, p, g), lv


def mix_dp(bug):
    def f(p, lam, x, y):
        n = lax.axis_size("dp")
        q = jax.nn.one_hot(y, K)
        perm = [(d, (d + 1) % n) for d in range(n)] if bug == "ppermute-shift" else [(d, n - 1 - d) for d in range(n)]
        if bug == "flip-local-only":
            xr, qr = x[::-1], q[::-1]
        else:
            xr, qr = lax.ppermute(x[::-1], "dp", perm), lax.ppermute(q[::-1], "dp", perm)
        xm = lam[:, None] * x + (1 - lam[:, None]) * xr
        qm = lam[:, None] * q + (1 - lam[:, None]) * qr
        lv, g = jax.value_and_grad(lambda p: jnp.sum(soft_xent(mlp(p, xm), qm)) / (x.shape[0] * n))(p)
        g, lv = psum(g, "dp"), psum(lv, "dp")
        return jax.tree.map(lambda w, d: w - 0.5 * d, p, g), lv
    return f


C.smap("s.mixup_reversed_pairs_ppermute.dp4", {"dp": 4}, mix_dp, (mrep, P("dp"), P("dp"), P("dp")), (mrep, P()),
       mix_ref, (mp, rng.uniform(0.2, 0.8, B).astype(np.float32), R(B, D), I(0, K, B)),
       bugs=[("flip-local-only", ["wrong-permutation"]), ("ppermute-shift", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 6. CutMix with a permutation of the global batch (an input): images and
#    labels all_gathered over dp, each device takes the partners of its rows
#    (the permutation sliced at its offset); one box per batch; labels mixed
#    by the box's area; the loss of a linear classifier on the mixed images.
CM_B, CM_S, CM_C = 8, 8, 3
BOX = (2, 6, 1, 4)  # rows 2..5, cols 1..3


def cutmix_ref(w, perm, x, y):
    r0, r1, c0, c1 = BOX
    box = np.zeros((CM_S, CM_S, 1), bool)
    box[r0:r1, c0:c1] = True
    xm = jnp.where(box, x[perm], x)
    lam = 1 - (r1 - r0) * (c1 - c0) / CM_S ** 2
    q = lam * jax.nn.one_hot(y, K) + (1 - lam) * jax.nn.one_hot(y[perm], K)
    return xm, jnp.mean(soft_xent(xm.reshape(x.shape[0], -1) @ w, q))


def cutmix_dp(bug):
    def f(w, perm, x, y):
        r0, r1, c0, c1 = BOX
        bl = x.shape[0]
        box = np.zeros((CM_S, CM_S, 1), bool)
        box[r0:r1, c0:c1] = True
        xa, ya = lax.all_gather(x, "dp", tiled=True), lax.all_gather(y, "dp", tiled=True)
        lp = lax.dynamic_slice_in_dim(perm, 0 if bug == "perm-no-offset" else idx("dp") * bl, bl)
        if bug == "perm-into-local-batch":
            xp, yp = x[lp % bl], y[lp % bl]
        else:
            xp, yp = xa[lp], ya[lp]
        xm = jnp.where(box, xp, x)
        lam = 1 - (r1 - r0) * (c1 - c0) / CM_S ** 2
        q = lam * jax.nn.one_hot(y, K) + (1 - lam) * jax.nn.one_hot(yp, K)
        return xm, pmean(jnp.mean(soft_xent(xm.reshape(bl, -1) @ w, q)), "dp")
    return f


C.smap("s.cutmix_global_perm_allgather.dp4", {"dp": 4}, cutmix_dp, (P(), P(), P("dp"), P("dp")), (P("dp"), P()),
       cutmix_ref, (R(CM_S * CM_S * CM_C, K, scale=0.1), rng.permutation(CM_B).astype(np.int32),
                    R(CM_B, CM_S, CM_S, CM_C), I(0, K, CM_B)),
       bugs=[("perm-no-offset", ["wrong-offset"]), ("perm-into-local-batch", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 7. focal loss with per-class alpha, classes over tp: log-sum-exp by pmax and
#    psum, the target logit and its alpha picked where the target falls in the
#    device's class range and psum'd; mean over the global batch (dp).
FV, FB, GAMMA = 32, 8, 2.0


def focal_ref(z, alpha, t):
    lp = jnp.take_along_axis(jax.nn.log_softmax(z), t[:, None], -1)[:, 0]
    return jnp.mean(-alpha[t] * (1 - jnp.exp(lp)) ** GAMMA * lp)


def focal_tp(bug):
    def f(z, alpha, t):
        vl = z.shape[1]
        if bug == "lse-local":
            lse = jax.nn.logsumexp(z, -1)
        else:
            m = pmax(jnp.max(z, -1), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp"))
        lt = t - (0 if bug == "target-no-offset" else idx("tp") * vl)
        ok = (lt >= 0) & (lt < vl)
        lc = jnp.clip(lt, 0, vl - 1)
        zt = psum(jnp.where(ok, jnp.take_along_axis(z, lc[:, None], -1)[:, 0], 0.0), "tp")
        at = psum(jnp.where(ok, alpha[lc], 0.0), "tp")
        lp = zt - lse
        return psum(jnp.sum(-at * (1 - jnp.exp(lp)) ** GAMMA * lp), "dp") / (z.shape[0] * lax.axis_size("dp"))
    return f


C.smap("s.focal_alpha_classes_tp.dp2xtp4", {"dp": 2, "tp": 4}, focal_tp, (P("dp", "tp"), P("tp"), P("dp")), P(),
       focal_ref, (R(FB, FV, scale=2.0), rng.uniform(0.25, 1.0, FV).astype(np.float32), I(0, FV, FB)),
       bugs=[("target-no-offset", ["wrong-offset"]), ("lse-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 8. a label-smoothed classifier head in an SGD step (check_vma=True): the
#    loss written as KL(q || softmax) with q = (1 - eps) one_hot + eps / V,
#    the head's columns (classes) over tp; batch over dp.
LS_D, LS_V, LS_B, EPS = 8, 32, 8, 0.1


def ls_ref(w, x, t):
    lp = jax.nn.log_softmax(x @ w)
    q = (1 - EPS) * jax.nn.one_hot(t, LS_V) + EPS / LS_V
    lv, g = jax.value_and_grad(lambda w: jnp.mean(jnp.sum(q * (jnp.log(q) - jax.nn.log_softmax(x @ w)), -1)))(w)
    del lp
    return w - 0.5 * g, lv


def ls_tp(bug):
    def f(w, x, t):
        vl = w.shape[1]
        v = vl if bug == "eps-over-local-classes" else vl * lax.axis_size("tp")
        off = 0 if bug == "target-no-offset" else idx("tp") * vl
        q = (1 - EPS) * jax.nn.one_hot(t - off, vl) + EPS / v

        def loss(w):
            z = x @ w
            m = pmax(lax.stop_gradient(jnp.max(z, -1)), "tp")
            lse = m + jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp"))
            kl = psum(jnp.sum(q * (jnp.log(q) - z), -1), "tp") + lse  # sum_v q = 1
            return pmean(jnp.mean(kl), "dp")
        lv, g = jax.value_and_grad(loss)(w)
        return w - 0.5 * g, lv
    return f


C.smap("s.label_smooth_kl_head_tp_vma.dp2xtp4", {"dp": 2, "tp": 4}, ls_tp, (P(None, "tp"), P("dp"), P("dp")),
       (P(None, "tp"), P()), ls_ref, (R(LS_D, LS_V, scale=0.5), R(LS_B, LS_D), I(0, LS_V, LS_B)), check_vma=True,
       bugs=[("eps-over-local-classes", ["numerics"]), ("target-no-offset", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 9. the gradient noise scale (McCandlish et al.) from data parallelism: each
#    device's gradient is the small-batch estimate, their pmean the big one;
#    |G|^2 and S from the pmean of the small squared norms and the squared norm
#    of the mean. The baseline computes the per-block gradients by a vmap over
#    the batch reshaped into the devices' blocks.
NS_N = 4


def gns_ref(p, x, y):
    bl = x.shape[0] // NS_N
    gl = lambda p, x, y: jax.grad(lambda p: jnp.mean(xent(mlp(p, x), y)))(p)
    gs = jax.vmap(gl, (None, 0, 0))(p, x.reshape(NS_N, bl, -1), y.reshape(NS_N, bl))
    sq_small = jnp.mean(sq_norms(gs))
    sq_big = jnp.sum(sq_norms(jax.tree.map(lambda l: l[None], gl(p, x, y))))
    bs, bb = bl, x.shape[0]
    g2 = (bb * sq_big - bs * sq_small) / (bb - bs)
    s = (sq_small - sq_big) / (1 / bs - 1 / bb)
    return g2, s, s / g2


def gns_dp(bug):
    def f(p, x, y):
        g = jax.grad(lambda p: jnp.mean(xent(mlp(p, x), y)))(p)
        own = sum(jnp.sum(jnp.square(l)) for l in jax.tree.leaves(g))
        gb = pmean(g, "dp")
        sq_big = sum(jnp.sum(jnp.square(l)) for l in jax.tree.leaves(gb))
        sq_small = own if bug == "small-norm-own-device" else pmean(own, "dp")
        if bug == "mean-sq-swapped":
            sq_small, sq_big = sq_big, sq_small
        bs, bb = x.shape[0], x.shape[0] * lax.axis_size("dp")
        g2 = (bb * sq_big - bs * sq_small) / (bb - bs)
        s = (sq_small - sq_big) / (1 / bs - 1 / bb)
        return g2, s, s / g2
    return f


C.smap("s.grad_noise_scale_small_big.dp4", {"dp": NS_N}, gns_dp, (mrep, P("dp"), P("dp")), (P(), P(), P()), gns_ref,
       (mp, R(B, D), I(0, K, B)),
       bugs=[("small-norm-own-device", ["missing-all-reduce"]), ("mean-sq-swapped", ["numerics"])])


# ---------------------------------------------------------------------------
# 10. per-coordinate variance of per-example gradients of a linear layer
#     whose columns are over tp (batch over dp): sums of g and g^2 psum'd over
#     dp, var = E[g^2] - E[g]^2; the trace of the covariance psum'd over tp.
PV_D, PV_O, PV_B = 8, 16, 16


def pv_loss(w, x, y):
    return 0.5 * jnp.sum(jnp.square(jnp.tanh(x @ w) - y))


def pv_ref(w, x, y):
    g = jax.vmap(jax.grad(pv_loss), (None, 0, 0))(w, x, y)
    var = jnp.var(g, 0)
    return jnp.mean(g, 0), var, jnp.sum(var)


def pv_tp(bug):
    def f(w, x, y):
        g = jax.vmap(jax.grad(pv_loss), (None, 0, 0))(w, x, y)
        n = x.shape[0] * lax.axis_size("dp")
        if bug == "mean-of-local-variances":
            mu, var = pmean(jnp.mean(g, 0), "dp"), pmean(jnp.var(g, 0), "dp")
        else:
            mu = psum(jnp.sum(g, 0), "dp") / n
            var = psum(jnp.sum(g * g, 0), "dp") / n - mu * mu
        return mu, var, psum(jnp.sum(var), "dp" if bug == "trace-psum-over-dp" else "tp")
    return f


C.smap("s.per_example_grad_variance_tp.dp2xtp2", {"dp": 2, "tp": 2}, pv_tp,
       (P(None, "tp"), P("dp"), P("dp", "tp")), (P(None, "tp"), P(None, "tp"), P()), pv_ref,
       (R(PV_D, PV_O, scale=0.4), R(PV_B, PV_D), R(PV_B, PV_O, scale=0.5)),
       bugs=[("mean-of-local-variances", ["numerics"]), ("trace-psum-over-dp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 11. m-sharpness SAM: each device's ascent step from its own gradient (no
#     collective on purpose: m = the local batch), the descent gradient at
#     the perturbed weights pmean'd; the baseline vmaps the two steps over
#     the batch's blocks and averages.
RHO = 0.1


def msam_ref(p, x, y):
    bl = x.shape[0] // 4

    def block(x, y):
        lo = lambda p: jnp.mean(xent(mlp(p, x), y))
        g = jax.grad(lo)(p)
        nrm = jnp.sqrt(sum(jnp.sum(jnp.square(l)) for l in jax.tree.leaves(g)))
        return jax.grad(lo)(jax.tree.map(lambda w, d: w + RHO * d / (nrm + 1e-12), p, g))
    gs = jax.vmap(block)(x.reshape(4, bl, -1), y.reshape(4, bl))
    return jax.tree.map(lambda w, d: w - 0.5 * jnp.mean(d, 0), p, gs)


def msam_dp(bug):
    def f(p, x, y):
        lo = lambda p: jnp.mean(xent(mlp(p, x), y))
        g = jax.grad(lo)(p)
        if bug == "ascent-pmean":
            g = pmean(g, "dp")
        nrm = jnp.sqrt(sum(jnp.sum(jnp.square(l)) for l in jax.tree.leaves(g)))
        gd = jax.grad(lo)(jax.tree.map(lambda w, d: w + RHO * d / (nrm + 1e-12), p, g))
        if bug != "descent-no-pmean":
            gd = pmean(gd, "dp")
        return jax.tree.map(lambda w, d: w - 0.5 * d, p, gd)
    return f


C.smap("s.msam_local_ascent.dp4", {"dp": 4}, msam_dp, (mrep, P("dp"), P("dp")), mrep, msam_ref,
       (mp, R(B, D), I(0, K, B)),
       bugs=[("ascent-pmean", ["numerics"]), ("descent-no-pmean", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 12. optax.contrib.differentially_private_aggregate (built per step from the
#     step's key) chained with optax.sgd: it clips, sums, noises and divides
#     by the number of examples it is given, so the per-example gradients are
#     all_gathered over dp first (tiled) and every device applies it to the
#     whole batch.
def dpa_opt(k):
    return optax.chain(optax.contrib.differentially_private_aggregate(CLIP, SIGMA, key=jax.random.wrap_key_data(k)), optax.sgd(LR))


def dpa_ref(p, k, x, y):
    opt = dpa_opt(k)
    g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, x, y)
    u, _ = opt.update(g, opt.init(p), p)
    return optax.apply_updates(p, u)


def dpa_dp(bug):
    def f(p, k, x, y):
        opt = dpa_opt(k)
        g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, x, y)
        if bug == "aggregate-local-then-pmean":
            u, _ = opt.update(g, opt.init(p), p)
            u = pmean(u, "dp")
        else:
            u, _ = opt.update(lax.all_gather(g, "dp", tiled=True), opt.init(p), p)
        return optax.apply_updates(p, u)
    return f


C.smap("s.optax_dp_aggregate_allgather.dp4", {"dp": 4}, dpa_dp, (mrep, P(), P("dp"), P("dp")), mrep, dpa_ref,
       (mp, key(12), R(B, D), I(0, K, B)), bugs=[("aggregate-local-then-pmean", ["numerics"])])


# ---------------------------------------------------------------------------
# 13. DP-SGD with per-example gradients computed in micro-batches by a
#     lax.scan over the local batch (vmap(grad) inside), the clipped sums
#     accumulated, psum'd over dp, noise added once after the psum.
MB = 2


def mb_dp(bug):
    def f(p, k, x, y):
        bl = x.shape[0]

        def step(acc, xy):
            xb, yb = xy
            g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, xb, yb)
            if bug == "clip-microbatch-sum":
                g = jax.tree.map(lambda l: l.sum(0, keepdims=True), g)
            return jax.tree.map(jnp.add, acc, clip_sum(g, sq_norms(g), CLIP)), None
        zero = jax.tree.map(jnp.zeros_like, p)
        s, _ = lax.scan(step, zero, (x.reshape(bl // MB, MB, -1), y.reshape(bl // MB, MB)))
        nz = gauss_like(k, p)
        if bug == "noise-before-psum":
            s = psum(jax.tree.map(lambda a, z: a + SIGMA * CLIP * z, s, nz), "dp")
        else:
            s = jax.tree.map(lambda a, z: a + SIGMA * CLIP * z, psum(s, "dp"), nz)
        nb = bl * lax.axis_size("dp")
        return jax.tree.map(lambda w, a: w - LR * a / nb, p, s)
    return f


C.smap("s.dpsgd_microbatch_scan.dp2", {"dp": 2}, mb_dp, (mrep, P(), P("dp"), P("dp")), mrep, dpsgd_ref,
       (mp, key(13), R(B, D), I(0, K, B)),
       bugs=[("clip-microbatch-sum", ["numerics"]), ("noise-before-psum", ["numerics"])])


# ---------------------------------------------------------------------------
# 14. per-example loss weights in bf16 (a curriculum's weights), normalised
#     by their sum over the global batch; the weighted loss and the weight sum
#     accumulated in f32 before the psum; gradients psum'd; SGD.
def bfw_ref(p, w, x, y):
    wf = w.astype(jnp.float32)
    lv, g = jax.value_and_grad(lambda p: jnp.sum(wf * xent(mlp(p, x), y)) / jnp.sum(wf))(p)
    return jax.tree.map(lambda a, d: a - 0.5 * d, p, g), lv


def bfw_dp(bug):
    def f(p, w, x, y):
        wf = w.astype(jnp.float32)
        if bug == "weight-sum-bf16":
            tot = psum(jnp.sum(w), "dp").astype(jnp.float32)
        elif bug == "weight-sum-local":
            tot = jnp.sum(wf)
        else:
            tot = psum(jnp.sum(wf), "dp")
        lv, g = jax.value_and_grad(lambda p: jnp.sum(wf * xent(mlp(p, x), y)) / tot)(p)
        g, lv = psum(g, "dp"), psum(lv, "dp")
        return jax.tree.map(lambda a, d: a - 0.5 * d, p, g), lv
    return f


C.smap("s.bf16_example_weights_global_norm.dp4", {"dp": 4}, bfw_dp, (mrep, P("dp"), P("dp"), P("dp")), (mrep, P()),
       bfw_ref, (mp, rng.uniform(0.5, 3.0, 32).astype(jnp.bfloat16), R(32, D), I(0, K, 32)),
       bugs=[("weight-sum-bf16", ["dtype-precision"]), ("weight-sum-local", ["missing-all-reduce"])])


# ===========================================================================
# GSPMD pairs (correct programs; jax.jit with in/out shardings).
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


M_DT = {"dp": 2, "tp": 4}
C.gspmd("g.dpsgd_vmap_grad_noise.dp8", {"dp": 8}, (mrep, P(), P("dp"), P("dp")), mrep, dpsgd_ref,
        (mp, key(21), R(B, D), I(0, K, B)))


def dpsgd_wsc(p, k, x, y):
    g = jax.vmap(jax.grad(ex_loss), (None, 0, 0))(p, x, y)
    g = {"w1": wsc(M_DT, g["w1"], "dp", None, "tp"), "b1": wsc(M_DT, g["b1"], "dp", "tp"),
         "w2": wsc(M_DT, g["w2"], "dp", "tp", None)}
    s = clip_sum(g, sq_norms(g), CLIP)
    nz = gauss_like(k, p)
    return jax.tree.map(lambda w, a, z: w - LR * (a + SIGMA * CLIP * z) / x.shape[0], p, s, nz)


C.gspmd("g.dpsgd_megatron_wsc.dp2xtp4", {"dp": 2, "tp": 4}, (mt_specs, P(), P("dp"), P("dp")), mt_specs, dpsgd_wsc,
        (mp, key(22), R(B, D), I(0, K, B)))


def ghost_jit(p, x, y):
    out = x @ p["w"] + p["b"]
    go = jax.grad(lambda o: 0.5 * jnp.sum(jnp.mean(jnp.sum(jnp.square(o - y), -1), -1)))(out)
    n2 = jnp.einsum("bst,bst->b", jnp.einsum("bsd,btd->bst", x, x), jnp.einsum("bso,bto->bst", go, go))
    n2 = n2 + jnp.sum(jnp.square(go.sum(1)), -1)
    c = jnp.minimum(1.0, G_CLIP / (jnp.sqrt(n2) + 1e-6))
    gw = jnp.einsum("btd,bto->do", x, c[:, None, None] * go)
    gb = jnp.einsum("b,bto->o", c, go)
    return {"w": p["w"] - 0.3 * gw / x.shape[0], "b": p["b"] - 0.3 * gb / x.shape[0]}


C.gspmd("g.ghost_clip_gram_norms.dp4xtp2", {"dp": 4, "tp": 2}, (gh_specs, P("dp"), P("dp", None, "tp")), gh_specs,
        ghost_jit, (gh_p, R(G_B, G_T, G_D), R(G_B, G_T, G_O)))


def mix_perm(p, perm, lam, x, y):
    q = jax.nn.one_hot(y, K)
    xm = lam[:, None] * x + (1 - lam[:, None]) * jnp.take(x, perm, 0)
    qm = lam[:, None] * q + (1 - lam[:, None]) * jnp.take(q, perm, 0)
    lv, g = jax.value_and_grad(lambda p: jnp.mean(soft_xent(mlp(p, xm), qm)))(p)
    return jax.tree.map(lambda w, d: w - 0.5 * d, p, g), lv


C.gspmd("g.mixup_global_perm_take.dp8", {"dp": 8}, (mrep, P(), P("dp"), P("dp"), P("dp")), (mrep, P()), mix_perm,
        (mp, rng.permutation(B).astype(np.int32), rng.uniform(0.2, 0.8, B).astype(np.float32), R(B, D),
         I(0, K, B)))

fl_opt = optax.adam(0.01)


def focal_ls_adam(w, st, x, t):
    def loss(w):
        lp = jax.nn.log_softmax(x @ w)
        q = (1 - EPS) * jax.nn.one_hot(t, LS_V) + EPS / LS_V
        pt = jnp.exp(jnp.sum(q * lp, -1))
        return jnp.mean(-(1 - pt) ** GAMMA * jnp.sum(q * lp, -1))
    lv, g = jax.value_and_grad(loss)(w)
    u, st = fl_opt.update(g, st, w)
    return optax.apply_updates(w, u), st, lv


fl_w = R(LS_D, LS_V, scale=0.5)
fl_st = np_tree(fl_opt.init(fl_w))
fl_ss = state_specs(fl_st, P(None, "tp"))
C.gspmd("g.focal_label_smooth_adam.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), fl_ss, P("dp"), P("dp")),
        (P(None, "tp"), fl_ss, P()), focal_ls_adam, (fl_w, fl_st, R(LS_B, LS_D), I(0, LS_V, LS_B)))


def gns_jit(p, x, y):
    bl = x.shape[0] // NS_N
    xb = wsc({"dp": NS_N}, x.reshape(NS_N, bl, -1), "dp")
    yb = wsc({"dp": NS_N}, y.reshape(NS_N, bl), "dp")
    gl = lambda x, y: jax.grad(lambda p: jnp.mean(xent(mlp(p, x), y)))(p)
    gs = jax.vmap(gl)(xb, yb)
    sq_small = jnp.mean(sq_norms(gs))
    sq_big = sum(jnp.sum(jnp.square(jnp.mean(l, 0))) for l in jax.tree.leaves(gs))
    bs, bb = bl, x.shape[0]
    g2 = (bb * sq_big - bs * sq_small) / (bb - bs)
    s = (sq_small - sq_big) / (1 / bs - 1 / bb)
    return g2, s, s / g2


C.gspmd("g.grad_noise_scale_blocks_wsc.dp4", {"dp": NS_N}, (mrep, P("dp"), P("dp")), (P(), P(), P()), gns_jit,
        (mp, R(B, D), I(0, K, B)))

C.finish()
