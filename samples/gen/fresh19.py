"""samples/fresh19: a nineteenth batch of programs as a user writes them, on
the theme of matrix and second-order optimizers and layer-wise update rules
on sharded parameters in current JAX / optax, none of them an idiom of
samples/fresh .. fresh16, probe, train or wild.
shard_map families: Muon on a tall matrix with its rows over fsdp, the
Newton-Schulz iteration written in the tall orientation (X <- aX + X (bB +
cB^2), the Gram matrix B = X^T X psum'd, no gather), Nesterov momentum, the
sqrt(max(1, rows/cols)) scale from the global shape and decoupled weight
decay; Muon on a wide matrix with its columns over tp, Polar-Express style
per-iteration coefficients, A = X X^T psum'd and Moonlight's 0.2
sqrt(max(m, n)) RMS-matching scale; Muon's iteration on a matrix sharded on
both dims (rows all_gathered over fsdp, the row block of A psum'd over tp, A
all_gathered for A^2); a training step with distributed Muon by layer
ownership (a scanned residual MLP of 8 square layers, batch over dp, the
gradients pmean'd, each device orthogonalising its 2 layers, momentum
sharded on the layer axis, the updates all_gathered); Shampoo's factors
accumulated over three steps in a lax.scan for a column-sharded gradient (L
by a psum, R's column block from the all_gathered G) with inverse 4th roots
by eigh and the device's columns of R^(-1/4); blocked Shampoo with one
16 x 16 block per device, inverse roots by the coupled Newton iteration
(distributed-Shampoo style, lax.fori_loop) and layer-level Adagrad
grafting (norms psum'd); a SOAP step (Adam in the eigenbasis of the
factors, the gradient all_gathered to rotate, the rotation back as a
psum_scatter of per-device contributions, the bases refreshed by one power
iteration and jnp.linalg.qr); a K-FAC step of a two-layer MLP with batch
over dp (per-example pre-activation gradients from zero perturbations,
covariances psum'd and divided by the global batch, factor EMAs, Cholesky
solves by jax.scipy.linalg.cho_solve); a K-FAC activation factor from
bf16 activations (batch over dp, features over tp, f32 accumulation, the
row block from the all_gathered features) with Martens' pi-damping (trace
psum'd over diagonal blocks, the identity at the device's diagonal
offset); LAMB on an MLP over fsdp x tp whose trust-ratio norms come from
one helper that psums squares over both axes for every leaf (a replicated
leaf's overcount cancels in the ratio; weight decay masked to matrices);
Adafactor for a row-sharded weight (column statistics and mean(r) pmean'd,
update clipping and the relative step size by RMS over the whole weight);
an SGD step with global-norm clipping on dp x fsdp x tp (check_vma=True,
FSDP gathers in the forward pass, the loss pmean'd over the data axes,
each leaf's squared norm psum'd over exactly the axes of its spec); a SAM
step on a Megatron MLP (check_vma=True, the ascent norm psum'd over tp for
the sharded leaves only, a replicated bias added outside the psum); the
L-BFGS two-loop recursion (reversed and forward lax.scan) on a flat vector
over fsdp with psum'd inner products, and the same with every inner product
pmean'd (correct: the direction is invariant to a common scale of the
inner product); a Hessian-free step (Gauss-Newton-vector products by
jax.jvp / jax.vjp psum'd over dp, 8 CG iterations in a fori_loop on
replicated flattened parameters, their dots local); a Sophia-H step
(Hutchinson z * Hz by jax.jvp of jax.grad, check_vma=True, clipped
update); a ZeRO-2 LAMB step (per-leaf psum_scatter of the flattened
gradients, moments on chunks, trust-ratio norms psum'd over chunks,
all_gather back); a spectrally normalised update (6 power iterations on a
column-sharded gradient); DoG (distance over gradients: global distance
and gradient norms over a tp-sharded weight and a replicated bias); an EMA
of replicated parameters kept sharded over the tuple (dp, fsdp) with a
warmup decay, the chunk at idx(dp) * |fsdp| + idx(fsdp), all_gathered for
evaluation; gradient centralisation (a pmean'd column mean) before
optax.adam applied per shard; cautious AdamW (the sign-agreement mask
rescaled by its pmean'd mean).
Under GSPMD (correct programs): a Muon step with the Newton-Schulz iterate
and the Gram matrix constrained by with_sharding_constraint on fsdp x tp,
Shampoo with eigh inverse roots and SGD grafting on both weights of an MLP
in a training step, the SOAP step, the K-FAC step with the hidden units
over tp, optax.lamb with a weight-decay mask in an MLP step on fsdp x tp,
the Hessian-free CG step with the hidden units over tp, three iterations of
optax.lbfgs (zoom line search) on a logistic regression with the features
over fsdp, optax.contrib.prodigy in a Megatron MLP step, the SAM step, the
Sophia-H step, Adafactor on a weight over fsdp x tp and cautious AdamW on
a weight over fsdp x tp.
Left out, as idioms of earlier batches: LAMB trust ratios and a Muon step
on a sharded matrix (fresh3), Muon with the momentum all_gathered on FSDP
row shards and optax.contrib.muon (fresh9: here Gram matrices psum'd,
2-D sharded iterations and layer ownership), Adafactor for a weight over
both dims in a shard_map (fresh7: here rows over fsdp with clipping and
relative step), LARS with masks (fresh7), global-norm clipping over sharded
parameters and with an EMA (fresh2, fresh4, fresh5: here per-spec axes
under check_vma), NFNet AGC (fresh7), ZeRO-1 Adam by ppermute rings
(fresh13).
Changed for the numerics: two first-draft bug variants computed the right
function and were replaced -- the L-BFGS dots pmean'd instead of psum'd
(scale-free, now a correct family of its own, 14b.) and, under
check_vma=True, bug variants with a norm from the local shard only (global
clipping, SAM), which the type system rejects at trace time (the update of
a replicated leaf would vary over the mesh), replaced by pmean-for-psum
variants (the clipping family keeps one bug). Inputs were chosen so that
bugs show: gradients whose blocks or rows differ in scale (blocked
Shampoo's grafting, Adafactor), momentum whose sign agrees with the
gradient on a varying fraction of columns (cautious AdamW), a clipping
threshold below the gradient norm. The bug variants with a Newton-Schulz
normalisation whose error the iteration mostly absorbs (a psum of norms, a
norm over one axis of two) differ by 2e-4 .. 2e-3, still 1e3 times the
correct pairs' rounding; the Gram matrix psum'd over the wrong axis of two
diverges to about 1e25 (finite).
Each shard_map family has the bug variants a careless parallelisation makes
(a Frobenius norm or a Gram matrix from the local shard, a pmean where the
psum belongs, a sum of per-shard norms, an aspect-ratio scale from the
local shape, a norm or Gram psum'd over the wrong axis of two, an owner
slice without its stride, gradients not averaged, L without its psum, the
columns of R^(-1/4) at offset 0, grafting norms local or pmean'd, the
rotation back without its reduction, covariances over the local batch or
not psum'd, a bf16 psum, a trace of the local block, damping at offset 0,
column statistics over local rows, a local RMS clip, a replicated bias
inside the psum, local dots for gamma or rho, a GGN product not psum'd or
normalised by the local batch, a loss psum'd where it is pmean'd, a
reduce-scatter not averaged, a chunk at offset 0, a local distance, chunk
indices or gather axes in the wrong order, a mean over the wrong dim).
Exported with scalify_jax.export_pair; every pair is also run by JAX on
seeded inputs and its manifest entry records the largest difference from
the single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh19.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
import jax.flatten_util
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh19.sh)
from fresh_lib import Corpus, seeded, mse, np_tree, state_specs  # noqa: E402
from scalify_jax import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh19.py"
C = Corpus("samples/fresh19", SCRIPT, "samples/gen/run_fresh19.sh", sys.argv[1:])
rng, R, I = seeded(1919)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
NS_ABC = (3.4445, -4.7750, 2.0315)


def newton_schulz(g, steps=5, eps=1e-7):
    """Muon's quintic Newton-Schulz orthogonalisation (Keller Jordan's
    coefficients), the wide orientation: tall matrices are transposed."""
    a, b, c = NS_ABC
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / (jnp.linalg.norm(x) + eps)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    return x.T if tall else x


def sym_inv_root(m, p, eps):
    """m^(-1/p) of a symmetric PSD matrix by eigh, eps added to the spectrum."""
    lam, q = jnp.linalg.eigh(m)
    return (q * (jnp.maximum(lam, 0.0) + eps) ** (-1.0 / p)) @ q.T


def snorm(x, axes):
    """The Frobenius norm of an array sharded over axes (psum of squares)."""
    return jnp.sqrt(psum(jnp.sum(jnp.square(x)), axes))


# ---------------------------------------------------------------------------
# 1. Muon on a tall matrix whose rows are over fsdp: Nesterov momentum, the
#    Newton-Schulz iteration written for the tall orientation (X <- aX +
#    X (bB + cB^2) with the Gram matrix B = X^T X psum'd over the row
#    shards), the Frobenius norm by a psum of squares, the update scaled by
#    sqrt(max(1, rows / cols)) and decoupled weight decay.
MU_LR, MU_BETA, MU_WD = 0.02, 0.95, 0.01


def muon_tall(w, g, mom):
    mom = MU_BETA * mom + g
    u = newton_schulz(g + MU_BETA * mom)
    scale = max(1.0, w.shape[0] / w.shape[1]) ** 0.5
    return w - MU_LR * (scale * u + MU_WD * w), mom


def muon_rows(bug):
    def f(w, g, mom):
        a, b, c = NS_ABC
        mom = MU_BETA * mom + g
        x = g + MU_BETA * mom
        nrm = jnp.linalg.norm(x) if bug == "frob-norm-local" else snorm(x, "fsdp")
        x = x / (nrm + 1e-7)
        for _ in range(5):
            gram = x.T @ x
            B = gram if bug == "gram-no-psum" else psum(gram, "fsdp")
            x = a * x + x @ (b * B + c * B @ B)
        rows = w.shape[0] * (1 if bug == "scale-from-local-shape" else lax.axis_size("fsdp"))
        scale = max(1.0, rows / w.shape[1]) ** 0.5
        return w - MU_LR * (scale * x + MU_WD * w), mom
    return f


C.smap("s.muon_tall_rows_gram_psum.fsdp4", {"fsdp": 4}, muon_rows, (P("fsdp"),) * 3, (P("fsdp"), P("fsdp")),
       muon_tall, (R(64, 16, scale=0.3), R(64, 16), R(64, 16, scale=0.5)),
       bugs=[("frob-norm-local", ["missing-all-reduce"]), ("gram-no-psum", ["missing-all-reduce"]),
             ("scale-from-local-shape", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 2. Muon on a wide matrix whose columns are over tp, with per-iteration
#    (Polar-Express style) coefficients and plain (not Nesterov) momentum:
#    A = X X^T psum'd over the column shards, X <- aX + (bA + cA^2) X local;
#    Moonlight's update scale 0.2 sqrt(max(rows, cols)) to match AdamW's RMS.
PE_COEFS = [(4.0848, -6.8946, 2.9270), (3.9505, -6.3029, 2.6377), (3.7418, -5.5913, 2.3037),
            (2.8769, -3.1427, 1.2046), (2.8366, -3.0525, 1.2012)]


def polar_express(x):
    x = x / (jnp.linalg.norm(x) * 1.01 + 1e-7)
    for a, b, c in PE_COEFS:
        A = x @ x.T
        x = a * x + (b * A + c * A @ A) @ x
    return x


def muon_wide(w, g, mom):
    mom = 0.9 * mom + g
    return w - 0.01 * 0.2 * np.sqrt(max(w.shape)) * polar_express(mom), mom


def muon_cols(bug):
    def f(w, g, mom):
        mom = 0.9 * mom + g
        x = mom
        if bug == "norm-psum-of-norms":
            nrm = psum(jnp.linalg.norm(x), "tp")
        else:
            nrm = jnp.sqrt(psum(jnp.sum(x * x), "tp"))
        x = x / (nrm * 1.01 + 1e-7)
        for a, b, c in PE_COEFS:
            A = (pmean if bug == "gram-pmean" else psum)(x @ x.T, "tp")
            x = a * x + (b * A + c * A @ A) @ x
        cols = w.shape[1] * (1 if bug == "scale-from-local-cols" else lax.axis_size("tp"))
        return w - 0.01 * 0.2 * np.sqrt(max(w.shape[0], cols)) * x, mom
    return f


C.smap("s.muon_wide_cols_polar_express.tp4", {"tp": 4}, muon_cols, (P(None, "tp"),) * 3, (P(None, "tp"),) * 2,
       muon_wide, (R(16, 64, scale=0.3), R(16, 64), R(16, 64, scale=0.5)),
       bugs=[("gram-pmean", ["wrong-collective-op"]), ("norm-psum-of-norms", ["wrong-collective-op"]),
             ("scale-from-local-cols", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 3. Muon's Newton-Schulz on a matrix sharded on both dims (rows over fsdp,
#    columns over tp): the rows all_gathered over fsdp, the row block of
#    A = X X^T psum'd over tp, A all_gathered over fsdp for A^2 and the
#    product with the gathered X; the norm over both axes.
def muon_2d(bug):
    def f(w, g):
        a, b, c = NS_ABC
        x = g / (snorm(g, "tp" if bug == "norm-over-tp-only" else ("fsdp", "tp")) + 1e-7)
        for _ in range(5):
            xg = lax.all_gather(x, "fsdp", axis=0, tiled=True)
            a_blk = psum(x @ xg.T, "fsdp" if bug == "gram-psum-over-fsdp" else "tp")
            a_all = lax.all_gather(a_blk, "fsdp", axis=0, tiled=True)
            x = a * x + (b * a_blk + c * a_blk @ a_all) @ xg
        return w - 0.02 * x
    return f


C.smap("s.muon_ns_2d_sharded_gathers.fsdp2xtp4", {"fsdp": 2, "tp": 4}, muon_2d, (P("fsdp", "tp"),) * 2,
       P("fsdp", "tp"), lambda w, g: w - 0.02 * newton_schulz(g), (R(32, 64, scale=0.3), R(32, 64)),
       bugs=[("norm-over-tp-only", ["wrong-collective-group"]), ("gram-psum-over-fsdp", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 4. a training step with distributed Muon by layer ownership: a residual
#    tanh MLP of 8 square layers (stacked, lax.scan), batch over dp; the
#    gradients pmean'd, each device owning 2 of the 8 layers (their momentum
#    sharded over dp on the layer axis), orthogonalising only those and
#    all_gathering the updates.
OW_L, OW_D = 8, 16


def stack_mlp(ws, x):
    h, _ = lax.scan(lambda h, w: (h + jnp.tanh(h @ w), None), x, ws)
    return h


def owner_step(ws, mom, x, y):
    g = jax.grad(lambda ws: mse(stack_mlp(ws, x), y))(ws)
    mom = MU_BETA * mom + g
    u = jax.vmap(newton_schulz)(g + MU_BETA * mom)
    return ws - MU_LR * u, mom


def owner(bug):
    def f(ws, mom, x, y):
        g = jax.grad(lambda ws: mse(stack_mlp(ws, x), y))(ws)
        if bug != "grad-no-pmean":
            g = pmean(g, "dp")
        k = mom.shape[0]
        start = idx("dp") * (1 if bug == "owner-offset-no-stride" else k)
        mine = lax.dynamic_slice_in_dim(g, start, k, 0)
        mom = MU_BETA * mom + mine
        u = jax.vmap(newton_schulz)(mine + MU_BETA * mom)
        return ws - MU_LR * lax.all_gather(u, "dp", axis=0, tiled=True), mom
    return f


C.smap("s.muon_layer_owner_allgather_step.dp4", {"dp": 4}, owner, (P(), P("dp"), P("dp"), P("dp")), (P(), P("dp")),
       owner_step, (R(OW_L, OW_D, OW_D, scale=0.25), R(OW_L, OW_D, OW_D, scale=0.05), R(16, OW_D), R(16, OW_D)),
       bugs=[("owner-offset-no-stride", ["wrong-offset"]), ("grad-no-pmean", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 5. Shampoo's Kronecker factors accumulated over three steps' gradients
#    (lax.scan) for a weight whose columns are over tp: L += G G^T by a psum
#    of the column shards' products, the column block of R += G^T G from the
#    all_gathered G; then L^(-1/4) G R^(-1/4) with inverse roots by eigh
#    (R gathered whole), the device's columns of R^(-1/4) at its offset.
SH_EPS = 1e-3


def shampoo_accum(w, gs, l0, r0):
    def acc(c, g):
        return (c[0] + g @ g.T, c[1] + g.T @ g), None
    (l, r), _ = lax.scan(acc, (l0, r0), gs)
    pre = sym_inv_root(l, 4, SH_EPS) @ gs[-1] @ sym_inv_root(r, 4, SH_EPS)
    return w - 0.05 * pre, l, r


def shampoo_cols(bug):
    def f(w, gs, l0, r_blk):
        def acc(c, g):
            gg = lax.all_gather(g, "tp", axis=1, tiled=True)
            dl = g @ g.T if bug == "l-no-psum" else psum(g @ g.T, "tp")
            return (c[0] + dl, c[1] + gg.T @ g), None
        (l, r_blk), _ = lax.scan(acc, (l0, r_blk), gs)
        r = lax.all_gather(r_blk, "tp", axis=1, tiled=True)
        n = w.shape[1]
        off = 0 if bug == "r-root-cols-at-0" else idx("tp") * n
        rr = lax.dynamic_slice_in_dim(sym_inv_root(r, 4, SH_EPS), off, n, 1)
        gl = lax.all_gather(gs[-1], "tp", axis=1, tiled=True)
        return w - 0.05 * (sym_inv_root(l, 4, SH_EPS) @ gl @ rr), l, r_blk
    return f


def spd(n, scale=0.1):
    a = R(n, n, scale=scale)
    return (a @ a.T + 0.05 * np.eye(n)).astype(np.float32)


C.smap("s.shampoo_factors_scan_eigh_root.tp4", {"tp": 4}, shampoo_cols,
       (P(None, "tp"), P(None, None, "tp"), P(), P(None, "tp")), (P(None, "tp"), P(), P(None, "tp")),
       shampoo_accum, (R(16, 32, scale=0.3), R(3, 16, 32), spd(16), spd(32)),
       bugs=[("l-no-psum", ["missing-all-reduce"]), ("r-root-cols-at-0", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 6. blocked Shampoo (distributed-Shampoo style): a 64 x 16 weight split
#    into 16 x 16 blocks, rows over fsdp so that each device holds one block;
#    per-block factors and inverse 4th roots by the coupled Newton iteration
#    (lax.fori_loop), no communication for those; Adagrad grafting at the
#    layer level (the ratio of the Frobenius norms of the whole layer's
#    Adagrad and Shampoo directions, psum'd).
BS = 16


def newton_inv_root(a, p=4, iters=30, ridge=1e-4):
    """Coupled Newton iteration for a^(-1/p) (as distributed Shampoo's
    matrix_inverse_pth_root, a Frobenius-norm bound instead of power
    iteration)."""
    n = a.shape[0]
    eye = jnp.eye(n, dtype=a.dtype)
    a = a + ridge * eye
    z = (1 + p) / (2 * jnp.linalg.norm(a))
    alpha = -1.0 / p

    def body(_, mh):
        m, h = mh
        mi = (1 - alpha) * eye + alpha * m
        return jnp.linalg.matrix_power(mi, p) @ m, h @ mi
    _, h = lax.fori_loop(0, iters, body, (a * z, eye * z ** (1.0 / p)))
    return h


def block_precond(g, l, r):
    l = l + g @ g.T
    r = r + g.T @ g
    return newton_inv_root(l) @ g @ newton_inv_root(r), l, r


def blocked_shampoo(w, g, ls, rs, acc):
    nb = w.shape[0] // BS
    pre, ls, rs = jax.vmap(block_precond)(g.reshape(nb, BS, -1), ls, rs)
    pre = pre.reshape(w.shape)
    acc = acc + g * g
    ada = g / (jnp.sqrt(acc) + 1e-8)
    return w - 0.1 * pre * (jnp.linalg.norm(ada) / jnp.linalg.norm(pre)), ls, rs, acc


def blocked_fsdp(bug):
    def f(w, g, ls, rs, acc):
        pre, l, r = block_precond(g, ls[0], rs[0])
        acc = acc + g * g
        ada = g / (jnp.sqrt(acc) + 1e-8)
        if bug == "graft-norm-local":
            ratio = jnp.linalg.norm(ada) / jnp.linalg.norm(pre)
        elif bug == "graft-pmean-of-norms":
            ratio = pmean(jnp.linalg.norm(ada), "fsdp") / pmean(jnp.linalg.norm(pre), "fsdp")
        else:
            ratio = snorm(ada, "fsdp") / snorm(pre, "fsdp")
        return w - 0.1 * pre * ratio, l[None], r[None], acc
    return f


C.smap("s.shampoo_blocked_newton_adagrad_graft.fsdp4", {"fsdp": 4}, blocked_fsdp, (P("fsdp"),) * 5,
       (P("fsdp"),) * 4, blocked_shampoo,
       (R(64, 16, scale=0.3), R(64, 16) * np.repeat([0.2, 1.0, 3.0, 0.5], 16)[:, None].astype(np.float32),
        np.stack([spd(16, 0.3) for _ in range(4)]),
        np.stack([spd(16, 0.3) for _ in range(4)]), np.abs(R(64, 16)) + 0.1),
       bugs=[("graft-norm-local", ["missing-all-reduce"]), ("graft-pmean-of-norms", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 7. a SOAP step: Adam in the eigenbasis of Shampoo's factors (the stored
#    bases QL, QR replicated), the weight and the Adam moments with their
#    columns over tp. The gradient all_gathered to rotate, the moments
#    updated on the device's columns, the rotation back as a psum_scatter of
#    per-device contributions; then the factors' EMA (L by a psum) and the
#    bases refreshed by one power iteration and QR.
SO_B1, SO_B2, SO_BS = 0.9, 0.99, 0.95


def soap_step(w, g, m, v, l, r, ql, qr):
    gr = ql.T @ g @ qr
    m = SO_B1 * m + (1 - SO_B1) * gr
    v = SO_B2 * v + (1 - SO_B2) * gr * gr
    u = ql @ (m / (jnp.sqrt(v) + 1e-6)) @ qr.T
    l = SO_BS * l + (1 - SO_BS) * g @ g.T
    r = SO_BS * r + (1 - SO_BS) * g.T @ g
    ql, _ = jnp.linalg.qr(l @ ql)
    qr, _ = jnp.linalg.qr(r @ qr)
    return w - 0.01 * u, m, v, l, r, ql, qr


def soap_tp(bug):
    def f(w, g, m, v, l, r, ql, qr):
        n = w.shape[1]
        gg = lax.all_gather(g, "tp", axis=1, tiled=True)
        qr_mine = lax.dynamic_slice_in_dim(qr, idx("tp") * n, n, 1)
        gr = ql.T @ gg @ qr_mine
        m = SO_B1 * m + (1 - SO_B1) * gr
        v = SO_B2 * v + (1 - SO_B2) * gr * gr
        part = ql @ (m / (jnp.sqrt(v) + 1e-6)) @ qr_mine.T
        if bug == "rotate-back-no-reduce":
            u = lax.dynamic_slice_in_dim(part, idx("tp") * n, n, 1)
        else:
            u = lax.psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
        ggt = g @ g.T if bug == "l-from-local-cols" else psum(g @ g.T, "tp")
        l = SO_BS * l + (1 - SO_BS) * ggt
        r = SO_BS * r + (1 - SO_BS) * gg.T @ gg
        ql, _ = jnp.linalg.qr(l @ ql)
        qr, _ = jnp.linalg.qr(r @ qr)
        return w - 0.01 * u, m, v, l, r, ql, qr
    return f


def orth(n):
    return np.linalg.qr(R(n, n))[0].astype(np.float32)


so_args = (R(16, 32, scale=0.3), R(16, 32), R(16, 32, scale=0.1), np.abs(R(16, 32, scale=0.1)) + 0.01,
           spd(16, 0.5), spd(32, 0.5), orth(16), orth(32))
C.smap("s.soap_eigbasis_adam_psum_scatter.tp4", {"tp": 4}, soap_tp, (P(None, "tp"),) * 4 + (P(),) * 4,
       (P(None, "tp"),) * 3 + (P(),) * 4, soap_step, so_args,
       bugs=[("rotate-back-no-reduce", ["missing-all-reduce"]), ("l-from-local-cols", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 8. a K-FAC step for a two-layer tanh MLP, batch over dp: per-example
#    pre-activation gradients from zero perturbations of the pre-activations
#    (jax.grad w.r.t. them, times the batch size), the activation and
#    gradient covariances psum'd and divided by the global batch, an EMA of
#    the factors, the pmean'd gradients preconditioned by damped Cholesky
#    solves on both sides.
KF_RHO, KF_DAMP, KF_LR = 0.9, 0.1, 0.2


def kfac_parts(w1, w2, x, y):
    def loss(w1, w2, e1, e2):
        z1 = x @ w1 + e1
        h = jnp.tanh(z1)
        return mse(h @ w2 + e2, y), h
    e1 = jnp.zeros((x.shape[0], w1.shape[1]))
    e2 = jnp.zeros((x.shape[0], w2.shape[1]))
    (g1, g2, d1, d2), h = jax.grad(loss, (0, 1, 2, 3), has_aux=True)(w1, w2, e1, e2)
    b = x.shape[0]
    return g1, g2, x, h, d1 * b, d2 * b


def kfac_solve(g, a, s):
    """(A + damping)^-1 grad (G + damping)^-1 for a (in, out) weight."""
    ca = jax.scipy.linalg.cho_factor(a + KF_DAMP * jnp.eye(a.shape[0]))
    cs = jax.scipy.linalg.cho_factor(s + KF_DAMP * jnp.eye(s.shape[0]))
    return jax.scipy.linalg.cho_solve(cs, jax.scipy.linalg.cho_solve(ca, g).T).T


def kfac_step(w1, w2, fa1, fg1, fa2, fg2, x, y):
    g1, g2, a1, a2, d1, d2 = kfac_parts(w1, w2, x, y)
    n = x.shape[0]
    fa1 = KF_RHO * fa1 + (1 - KF_RHO) * a1.T @ a1 / n
    fa2 = KF_RHO * fa2 + (1 - KF_RHO) * a2.T @ a2 / n
    fg1 = KF_RHO * fg1 + (1 - KF_RHO) * d1.T @ d1 / n
    fg2 = KF_RHO * fg2 + (1 - KF_RHO) * d2.T @ d2 / n
    return (w1 - KF_LR * kfac_solve(g1, fa1, fg1), w2 - KF_LR * kfac_solve(g2, fa2, fg2), fa1, fg1, fa2, fg2)


def kfac_dp(bug):
    def f(w1, w2, fa1, fg1, fa2, fg2, x, y):
        g1, g2, a1, a2, d1, d2 = kfac_parts(w1, w2, x, y)
        g1, g2 = pmean(g1, "dp"), pmean(g2, "dp")
        n = x.shape[0] * lax.axis_size("dp")
        cov = lambda u: psum(u.T @ u, "dp") / (x.shape[0] if bug == "cov-over-local-batch" else n)
        acov = (lambda u: u.T @ u / x.shape[0]) if bug == "act-cov-no-psum" else cov
        fa1 = KF_RHO * fa1 + (1 - KF_RHO) * acov(a1)
        fa2 = KF_RHO * fa2 + (1 - KF_RHO) * acov(a2)
        fg1 = KF_RHO * fg1 + (1 - KF_RHO) * cov(d1)
        fg2 = KF_RHO * fg2 + (1 - KF_RHO) * cov(d2)
        return (w1 - KF_LR * kfac_solve(g1, fa1, fg1), w2 - KF_LR * kfac_solve(g2, fa2, fg2), fa1, fg1, fa2, fg2)
    return f


kf_args = (R(8, 16, scale=0.4), R(16, 4, scale=0.4), spd(8, 0.3), spd(16, 0.05), spd(16, 0.3), spd(4, 0.1),
           R(32, 8), R(32, 4, scale=0.5))
C.smap("s.kfac_mlp_cov_psum_cholesky_step.dp4", {"dp": 4}, kfac_dp, (P(),) * 6 + (P("dp"), P("dp")), (P(),) * 6,
       kfac_step, kf_args,
       bugs=[("cov-over-local-batch", ["numerics"]), ("act-cov-no-psum", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 9. a K-FAC activation factor from bf16 activations whose batch is over dp
#    and features over tp: the factor's row block x_l^T x (the features
#    all_gathered over tp) with f32 accumulation, psum'd over dp in f32; an
#    EMA, then Tikhonov damping split by Martens' pi = sqrt((tr A / dA) /
#    (tr G / dG)) (the trace of A psum'd over the diagonal blocks), the
#    identity added at the device's diagonal offset.
def kfac_factor_damp(a_old, x, fg):
    n = x.shape[0]
    a = 0.8 * a_old + 0.2 * jnp.dot(x.T, x, preferred_element_type=jnp.float32) / n
    pi = jnp.sqrt((jnp.trace(a) / a.shape[0]) / (jnp.trace(fg) / fg.shape[0]))
    return a + pi * np.sqrt(1e-2) * jnp.eye(a.shape[0])


def factor_tp(bug):
    def f(a_old, x, fg):
        d_loc, d = a_old.shape[0], a_old.shape[1]
        xg = lax.all_gather(x, "tp", axis=1, tiled=True)
        part = jnp.dot(x.T, xg, preferred_element_type=jnp.float32)
        if bug == "cov-psum-in-bf16":
            cov = psum(part.astype(jnp.bfloat16), "dp").astype(jnp.float32)
        else:
            cov = psum(part, "dp")
        a = 0.8 * a_old + 0.2 * cov / (x.shape[0] * lax.axis_size("dp"))
        off = idx("tp") * d_loc
        diag = jnp.diagonal(lax.dynamic_slice_in_dim(a, off, d_loc, 1))
        tr = jnp.sum(diag) if bug == "trace-local-block" else psum(jnp.sum(diag), "tp")
        pi = jnp.sqrt((tr / d) / (jnp.trace(fg) / fg.shape[0]))
        eye = jnp.eye(d_loc, d, k=0) if bug == "damping-eye-offset-0" else \
            (jnp.arange(d)[None, :] == off + jnp.arange(d_loc)[:, None]).astype(a.dtype)
        return a + pi * np.sqrt(1e-2) * eye
    return f


C.smap("s.kfac_bf16_act_factor_pi_damping.dp2xtp4", {"dp": 2, "tp": 4}, factor_tp,
       (P("tp"), P("dp", "tp"), P()), P("tp"), kfac_factor_damp,
       (spd(32, 0.2), R(16, 32).astype(jnp.bfloat16), spd(8, 0.3)),
       bugs=[("cov-psum-in-bf16", ["dtype-precision"]), ("trace-local-block", ["missing-all-reduce"]),
             ("damping-eye-offset-0", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 10. LAMB on an MLP sharded over fsdp x tp (W1 rows over fsdp and columns
#     over tp, W2 the other way round, the bias over tp, the gain
#     replicated): Adam moments with bias correction, weight decay masked to
#     the matrices, and per-layer trust ratios whose norms come from one
#     helper that psums the squares over both axes for every leaf -- for a
#     leaf replicated over an axis both norms are overcounted by the same
#     factor, which cancels in the ratio.
LB_B1, LB_B2, LB_WD, LB_LR, LB_T = 0.9, 0.999, 0.01, 0.05, 3


def lamb_leaf(w, g, m, v, decay, norm):
    m = LB_B1 * m + (1 - LB_B1) * g
    v = LB_B2 * v + (1 - LB_B2) * g * g
    u = (m / (1 - LB_B1 ** LB_T)) / (jnp.sqrt(v / (1 - LB_B2 ** LB_T)) + 1e-6)
    if decay:
        u = u + LB_WD * w
    wn, un = norm(w, u)
    ratio = jnp.where((wn > 0) & (un > 0), wn / un, 1.0)
    return w - LB_LR * ratio * u, m, v


def lamb(params, grads, ms, vs, norm):
    out = {k: lamb_leaf(params[k], grads[k], ms[k], vs[k], params[k].ndim == 2, norm) for k in params}
    return tuple({k: o[i] for k, o in out.items()} for i in range(3))


def lamb_single(params, grads, ms, vs):
    return lamb(params, grads, ms, vs, lambda w, u: (jnp.linalg.norm(w), jnp.linalg.norm(u)))


def lamb_sharded(bug):
    def norm(w, u):
        ax = ("fsdp", "tp")
        if bug == "trust-pmean-of-norms":
            return pmean(jnp.linalg.norm(w), ax), pmean(jnp.linalg.norm(u), ax)
        if bug == "update-norm-local":
            return snorm(w, ax), jnp.linalg.norm(u)
        return snorm(w, ax), snorm(u, ax)
    return lambda params, grads, ms, vs: lamb(params, grads, ms, vs, norm)


lb_ps = {"w1": P("fsdp", "tp"), "b1": P("tp"), "w2": P("tp", "fsdp"), "gain": P()}
lb_shapes = {"w1": (16, 32), "b1": (32,), "w2": (32, 16), "gain": (16,)}
lb_p = {k: R(*s, scale=0.5) for k, s in lb_shapes.items()}
lb_g = {k: R(*s) for k, s in lb_shapes.items()}
lb_m = {k: R(*s, scale=0.1) for k, s in lb_shapes.items()}
lb_v = {k: np.abs(R(*s, scale=0.1)) for k, s in lb_shapes.items()}
C.smap("s.lamb_trust_ratio_uniform_psum_helper.fsdp2xtp4", {"fsdp": 2, "tp": 4}, lamb_sharded, (lb_ps,) * 4,
       (lb_ps,) * 3, lamb_single, (lb_p, lb_g, lb_m, lb_v),
       bugs=[("trust-pmean-of-norms", ["wrong-collective-op"]), ("update-norm-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 11. Adafactor (factored second moments, update clipping, relative step
#     size) for a weight whose rows are over fsdp: row statistics local, the
#     column statistics a pmean of the local row means, v = r c^T / mean(r)
#     with mean(r) pmean'd, RMS(update) and RMS(w) over the whole weight.
AF_B2, AF_RHO, AF_D = 0.8, 0.05, 1.0


def adafactor(w, g, vr, vc):
    g2 = g * g + 1e-30
    vr = AF_B2 * vr + (1 - AF_B2) * jnp.mean(g2, 1)
    vc = AF_B2 * vc + (1 - AF_B2) * jnp.mean(g2, 0)
    vhat = vr[:, None] * vc[None, :] / jnp.mean(vr)
    u = g / jnp.sqrt(vhat)
    u = u / jnp.maximum(1.0, jnp.sqrt(jnp.mean(u * u)) / AF_D)
    lr = AF_RHO * jnp.maximum(1e-3, jnp.sqrt(jnp.mean(w * w)))
    return w - lr * u, vr, vc


def adafactor_rows(bug):
    def f(w, g, vr, vc):
        g2 = g * g + 1e-30
        vr = AF_B2 * vr + (1 - AF_B2) * jnp.mean(g2, 1)
        cm = jnp.mean(g2, 0)
        vc = AF_B2 * vc + (1 - AF_B2) * (cm if bug == "col-mean-local-rows" else pmean(cm, "fsdp"))
        rm = jnp.mean(vr) if bug == "row-norm-local-mean" else pmean(jnp.mean(vr), "fsdp")
        u = g / jnp.sqrt(vr[:, None] * vc[None, :] / rm)
        ms = jnp.mean(u * u) if bug == "rms-clip-per-shard" else pmean(jnp.mean(u * u), "fsdp")
        u = u / jnp.maximum(1.0, jnp.sqrt(ms) / AF_D)
        lr = AF_RHO * jnp.maximum(1e-3, jnp.sqrt(pmean(jnp.mean(w * w), "fsdp")))
        return w - lr * u, vr, vc
    return f


C.smap("s.adafactor_rows_fsdp_clip_relative_step.fsdp4", {"fsdp": 4}, adafactor_rows,
       (P("fsdp"), P("fsdp"), P("fsdp"), P()), (P("fsdp"), P("fsdp"), P()), adafactor,
       (R(64, 16, scale=0.5), R(64, 16) * np.linspace(0.2, 3.0, 64, dtype=np.float32)[:, None],
        np.abs(R(64)) + 0.1, np.abs(R(16)) + 0.1),
       bugs=[("col-mean-local-rows", ["missing-all-reduce"]), ("row-norm-local-mean", ["missing-all-reduce"]),
             ("rms-clip-per-shard", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 12. an SGD step with clipping by the global norm on a dp x fsdp x tp mesh
#     (check_vma=True): a gain-scaled MLP with W1 (fsdp, tp), b1 over tp,
#     W2 (tp, fsdp) and the gain replicated; FSDP gathers in the forward pass,
#     the loss pmean'd over the data axes (dp, fsdp), jax.grad of it; the
#     squared norm of each gradient leaf psum'd over exactly the axes its
#     spec shards it on.
CL_MAX, CL_LR = 0.5, 0.3
cl_ps = {"w1": P("fsdp", "tp"), "b1": P("tp"), "w2": P("tp", "fsdp"), "gain": P()}


def clip_mlp(p, x):
    return jax.nn.gelu((x * p["gain"]) @ p["w1"] + p["b1"]) @ p["w2"]


def clip_step(p, x, y):
    g = jax.grad(lambda p: mse(clip_mlp(p, x), y))(p)
    gn = optax.global_norm(g)
    s = jnp.minimum(1.0, CL_MAX / gn)
    return jax.tree.map(lambda w, d: w - CL_LR * s * d, p, g), gn


def spec_axes(spec):
    return tuple(a for e in spec if e is not None for a in (e if isinstance(e, tuple) else (e,)))


def clip_sharded(bug):
    def f(p, x, y):
        def loss(p):
            w1 = lax.all_gather(p["w1"], "fsdp", axis=0, tiled=True)
            w2 = lax.all_gather(p["w2"], "fsdp", axis=1, tiled=True)
            h = jax.nn.gelu((x * p["gain"]) @ w1 + p["b1"])
            return pmean(mse(psum(h @ w2, "tp"), y), ("dp", "fsdp"))
        g = jax.grad(loss)(p)
        sq = 0.0
        for k, d in g.items():
            axes = spec_axes(cl_ps[k])
            part = jnp.sum(d * d)
            red = pmean if bug == "norm-pmean-per-leaf" else psum
            sq = sq + (red(part, axes) if axes else part)
        gn = jnp.sqrt(sq)
        s = jnp.minimum(1.0, CL_MAX / gn)
        return jax.tree.map(lambda w, d: w - CL_LR * s * d, p, g), gn
    return f


cl_p = {"w1": R(16, 32, scale=0.4), "b1": R(32, scale=0.1), "w2": R(32, 16, scale=0.3),
        "gain": 1.0 + R(16, scale=0.2)}
C.smap("s.clip_global_norm_per_spec_axes_step.dp2xfsdp2xtp2", {"dp": 2, "fsdp": 2, "tp": 2}, clip_sharded,
       (cl_ps, P(("dp", "fsdp")), P(("dp", "fsdp"))), (cl_ps, P()), clip_step,
       (cl_p, R(16, 16), R(16, 16)), check_vma=True,
       bugs=[("norm-pmean-per-leaf", ["wrong-collective-op"])])


# ---------------------------------------------------------------------------
# 13. a sharpness-aware minimisation (SAM) step on a Megatron MLP (W1 over
#     tp by columns, W2 by rows, the output bias replicated), batch over dp,
#     check_vma=True: the first gradient's global norm psum'd over tp for the
#     sharded leaves only, the ascent step rho g / |g|, the second gradient at
#     the perturbed weights, SGD with it.
SAM_RHO, SAM_LR = 0.1, 0.2


def sam_mlp(p, x):
    return jax.nn.gelu(x @ p["w1"]) @ p["w2"] + p["b2"]


def sam_step(p, x, y):
    loss = lambda p: mse(sam_mlp(p, x), y)
    g = jax.grad(loss)(p)
    e = jax.tree.map(lambda d: SAM_RHO * d / optax.global_norm(g), g)
    g2 = jax.grad(loss)(jax.tree.map(jnp.add, p, e))
    return jax.tree.map(lambda w, d: w - SAM_LR * d, p, g2)


def sam_sharded(bug):
    def f(p, x, y):
        def loss(p):
            return pmean(mse(psum(jax.nn.gelu(x @ p["w1"]) @ p["w2"], "tp") + p["b2"], y), "dp")
        g = jax.grad(loss)(p)
        tp_sq = jnp.sum(g["w1"] ** 2) + jnp.sum(g["w2"] ** 2)
        if bug == "norm-pmean-over-tp":
            sq = pmean(tp_sq, "tp") + jnp.sum(g["b2"] ** 2)
        elif bug == "bias-inside-tp-psum":
            sq = psum(tp_sq + jnp.sum(g["b2"] ** 2), "tp")
        else:
            sq = psum(tp_sq, "tp") + jnp.sum(g["b2"] ** 2)
        e = jax.tree.map(lambda d: SAM_RHO * d / jnp.sqrt(sq), g)
        g2 = jax.grad(loss)(jax.tree.map(jnp.add, p, e))
        return jax.tree.map(lambda w, d: w - SAM_LR * d, p, g2)
    return f


sam_ps = {"w1": P(None, "tp"), "w2": P("tp"), "b2": P()}
C.smap("s.sam_ascent_global_norm_step.dp2xtp4", {"dp": 2, "tp": 4}, sam_sharded, (sam_ps, P("dp"), P("dp")), sam_ps,
       sam_step, ({"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.5)},
                  R(16, 16), R(16, 8)), check_vma=True,
       bugs=[("norm-pmean-over-tp", ["wrong-collective-op"]), ("bias-inside-tp-psum", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 14. the L-BFGS two-loop recursion on a flat parameter vector sharded over
#     fsdp (history of 4 (s, y) pairs, newest last): every inner product a
#     psum of the local dots, the first loop a reversed lax.scan, the second
#     a forward one, gamma = s.y / y.y from the newest pair.
def two_loop(g, ss, ys, dot):
    rho = 1.0 / jax.vmap(dot)(ys, ss)

    def back(q, syr):
        s, y, r = syr
        a = r * dot(s, q)
        return q - a * y, a
    q, alpha = lax.scan(back, g, (ss, ys, rho), reverse=True)
    r = q * dot(ss[-1], ys[-1]) / dot(ys[-1], ys[-1])

    def fwd(r, syra):
        s, y, rh, a = syra
        return r + s * (a - rh * dot(y, r)), None
    r, _ = lax.scan(fwd, r, (ss, ys, rho, alpha))
    return r


def lbfgs_single(x, g, ss, ys):
    return x - 0.5 * two_loop(g, ss, ys, jnp.dot)


def lbfgs_sharded(bug, red=psum):
    def f(x, g, ss, ys):
        def dot(a, b):
            return red(jnp.dot(a, b), "fsdp")
        rho = 1.0 / jax.vmap(jnp.dot if bug == "rho-local-dots" else dot)(ys, ss)

        def back(q, syr):
            s, y, r = syr
            a = r * dot(s, q)
            return q - a * y, a
        q, alpha = lax.scan(back, g, (ss, ys, rho), reverse=True)
        gdot = jnp.dot if bug == "gamma-local-dots" else dot
        r = q * gdot(ss[-1], ys[-1]) / gdot(ys[-1], ys[-1])

        def fwd(r, syra):
            s, y, rh, a = syra
            return r + s * (a - rh * dot(y, r)), None
        r, _ = lax.scan(fwd, r, (ss, ys, rho, alpha))
        return x - 0.5 * r
    return f


lb_s = R(4, 64, scale=0.3)
lb_y = (lb_s * (1.0 + np.abs(R(4, 64))) + R(4, 64, scale=0.05)).astype(np.float32)
C.smap("s.lbfgs_two_loop_psum_dots_scan.fsdp4", {"fsdp": 4}, lbfgs_sharded, (P("fsdp"), P("fsdp"),
       P(None, "fsdp"), P(None, "fsdp")), P("fsdp"), lbfgs_single, (R(64), R(64), lb_s, lb_y),
       bugs=[("gamma-local-dots", ["missing-all-reduce"]), ("rho-local-dots", ["missing-all-reduce"])])

# 14b. the same recursion with every inner product pmean'd instead of psum'd:
#      correct, since the direction is invariant to a common scale of the
#      inner product (rho, alpha, beta and gamma each take a ratio of dots).
C.smap("s.lbfgs_two_loop_pmean_dots_scale_free.fsdp4", {"fsdp": 4}, lambda bug: lbfgs_sharded(bug, pmean),
       (P("fsdp"), P("fsdp"), P(None, "fsdp"), P(None, "fsdp")), P("fsdp"), lbfgs_single, (R(64), R(64), lb_s, lb_y))


# ---------------------------------------------------------------------------
# 15. a Hessian-free (truncated Newton) step: damped Gauss-Newton-vector
#     products J^T H J v of an MLP's mse by jax.jvp and jax.vjp over the
#     device's batch, psum'd over dp and divided by the global batch; 8
#     conjugate-gradient iterations (lax.fori_loop) on the flattened
#     parameters, replicated, whose inner products need no collective.
HF_DAMP = 0.5


def hf_net(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]


def cg(mv, b, iters=8):
    def body(_, st):
        x, r, d, rr = st
        ad = mv(d)
        a = rr / jnp.dot(d, ad)
        x, r = x + a * d, r - a * ad
        rn = jnp.dot(r, r)
        return x, r, r + (rn / rr) * d, rn
    x, *_ = lax.fori_loop(0, iters, body, (jnp.zeros_like(b), b, b, jnp.dot(b, b)))
    return x


def hf_step(p, x, y):
    flat, unravel = jax.flatten_util.ravel_pytree(p)
    g = jax.flatten_util.ravel_pytree(jax.grad(lambda p: mse(hf_net(p, x), y))(p))[0]
    f = lambda fl: hf_net(unravel(fl), x)

    def ggn(v):
        out, jv = jax.jvp(f, (flat,), (v,))
        return jax.vjp(f, flat)[1](2.0 * jv / out.size)[0] + HF_DAMP * v
    return unravel(flat - cg(ggn, g))


def hf_sharded(bug):
    def fn(p, x, y):
        flat, unravel = jax.flatten_util.ravel_pytree(p)
        g = pmean(jax.flatten_util.ravel_pytree(jax.grad(lambda p: mse(hf_net(p, x), y))(p))[0], "dp")
        f = lambda fl: hf_net(unravel(fl), x)
        n = y.size * (1 if bug == "ggn-local-normaliser" else lax.axis_size("dp"))

        def ggn(v):
            out, jv = jax.jvp(f, (flat,), (v,))
            jtj = jax.vjp(f, flat)[1](2.0 * jv / n)[0]
            return (jtj if bug == "ggn-no-psum" else psum(jtj, "dp")) + HF_DAMP * v
        return unravel(flat - cg(ggn, g))
    return fn


hf_p = {"w1": R(8, 16, scale=0.4), "b1": R(16, scale=0.1), "w2": R(16, 4, scale=0.3)}
C.smap("s.hessian_free_ggn_cg_step.dp4", {"dp": 4}, hf_sharded, (P(), P("dp"), P("dp")), P(), hf_step,
       (hf_p, R(32, 8), R(32, 4)),
       bugs=[("ggn-no-psum", ["missing-all-reduce"]), ("ggn-local-normaliser", ["numerics"])])


# ---------------------------------------------------------------------------
# 16. a Sophia-H step on a Megatron MLP (check_vma=True), batch over dp:
#     the diagonal Hessian estimate z * (H z) by forward-over-reverse
#     (jax.jvp of jax.grad) with given Rademacher z sharded like the weights,
#     its EMA, momentum, and the update clip(m / max(gamma h, eps), 1).
SO_G, SO_LR = 0.05, 0.02


def sophia_mlp(p, x):
    return jnp.tanh(x @ p["w1"]) @ p["w2"]


def sophia_update(p, g, hz, z, m, h):
    m = jax.tree.map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    h = jax.tree.map(lambda a, zz, hv: 0.95 * a + 0.05 * zz * hv, h, z, hz)
    p = jax.tree.map(lambda w, mm, hh: w - SO_LR * jnp.clip(mm / jnp.maximum(SO_G * hh, 1e-3), -1, 1), p, m, h)
    return p, m, h


def sophia_step(p, z, m, h, x, y):
    loss = lambda p: mse(sophia_mlp(p, x), y)
    g, hz = jax.jvp(jax.grad(loss), (p,), (z,))
    return sophia_update(p, g, hz, z, m, h)


def sophia_sharded(bug):
    def f(p, z, m, h, x, y):
        red = psum if bug == "loss-psum-over-dp" else pmean
        loss = lambda p: red(mse(psum(jnp.tanh(x @ p["w1"]) @ p["w2"], "tp"), y), "dp")
        g, hz = jax.jvp(jax.grad(loss), (p,), (z,))
        return sophia_update(p, g, hz, z, m, h)
    return f


sp_ps = {"w1": P(None, "tp"), "w2": P("tp")}
sp_p = {"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3)}
sp_z = {k: np.sign(R(*v.shape)).astype(np.float32) for k, v in sp_p.items()}
sp_m = {k: R(*v.shape, scale=0.05) for k, v in sp_p.items()}
sp_h = {k: np.abs(R(*v.shape, scale=0.05)) for k, v in sp_p.items()}
C.smap("s.sophia_hutchinson_jvp_grad_clip.dp2xtp4", {"dp": 2, "tp": 4}, sophia_sharded,
       (sp_ps, sp_ps, sp_ps, sp_ps, P("dp"), P("dp")), (sp_ps, sp_ps, sp_ps), sophia_step,
       (sp_p, sp_z, sp_m, sp_h, R(16, 16), R(16, 8)), check_vma=True,
       bugs=[("loss-psum-over-dp", ["wrong-collective-op"])])

# ---------------------------------------------------------------------------
# 17. a ZeRO-2 LAMB step on a replicated MLP, batch over dp: each leaf's
#     flattened gradient reduce-scattered (psum_scatter / dp), the Adam
#     moments and the update on the device's chunk, the trust ratio's norms
#     psum'd over the chunks, the new chunks all_gathered back into leaves.
def z2_net(p, x):
    return jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b2"]


def z2_lamb_single(p, m, v, x, y):
    g = jax.grad(lambda p: mse(z2_net(p, x), y))(p)
    flat = lambda t: {k: a.reshape(-1) for k, a in t.items()}
    out = {k: lamb_leaf(w, d, mm, vv, k != "b2", lambda w, u: (jnp.linalg.norm(w), jnp.linalg.norm(u)))
           for (k, w), d, mm, vv in zip(flat(p).items(), flat(g).values(), m.values(), v.values())}
    return ({k: o[0].reshape(p[k].shape) for k, o in out.items()}, {k: o[1] for k, o in out.items()},
            {k: o[2] for k, o in out.items()})


def z2_lamb(bug):
    def f(p, m, v, x, y):
        g = jax.grad(lambda p: mse(z2_net(p, x), y))(p)
        n = lax.axis_size("dp")
        new_p, new_m, new_v = {}, {}, {}
        for k in p:
            gc = lax.psum_scatter(g[k].reshape(-1), "dp", tiled=True)
            if bug != "scatter-sum-not-mean":
                gc = gc / n
            c = gc.shape[0]
            off = 0 if bug == "param-chunk-offset-0" else idx("dp") * c
            wc = lax.dynamic_slice_in_dim(p[k].reshape(-1), off, c)
            norm = (lambda w, u: (jnp.linalg.norm(w), jnp.linalg.norm(u))) if bug == "trust-norm-chunk" else \
                (lambda w, u: (snorm(w, "dp"), snorm(u, "dp")))
            wc, new_m[k], new_v[k] = lamb_leaf(wc, gc, m[k], v[k], k != "b2", norm)
            new_p[k] = lax.all_gather(wc, "dp", tiled=True).reshape(p[k].shape)
        return new_p, new_m, new_v
    return f


z2_p = {"w1": R(8, 16, scale=0.4), "w2": R(16, 8, scale=0.3), "b2": R(8, scale=0.2)}
z2_m = {k: R(a.size, scale=0.05) for k, a in z2_p.items()}
z2_v = {k: np.abs(R(a.size, scale=0.01)) for k, a in z2_p.items()}
z2_rep = {k: P() for k in z2_p}
z2_sh = {k: P("dp") for k in z2_p}
C.smap("s.zero2_lamb_chunks_trust_psum_step.dp4", {"dp": 4}, z2_lamb, (z2_rep, z2_sh, z2_sh, P("dp"), P("dp")),
       (z2_rep, z2_sh, z2_sh), z2_lamb_single, (z2_p, z2_m, z2_v, R(16, 8), R(16, 8)),
       bugs=[("trust-norm-chunk", ["missing-all-reduce"]), ("scatter-sum-not-mean", ["wrong-collective-op"]),
             ("param-chunk-offset-0", ["wrong-offset"])])


# ---------------------------------------------------------------------------
# 18. a spectrally normalised update (modular-norm / Scion style): the
#     gradient of a weight with its columns over tp divided by its largest
#     singular value, estimated by 6 power iterations from a given start
#     vector (u = G v psum'd over tp, v = G^T u local, |v| psum'd), times
#     sqrt(fan_out / fan_in).
def spectral_update(w, g, v0):
    v = v0 / jnp.linalg.norm(v0)
    for _ in range(6):
        u = g @ v
        u = u / jnp.linalg.norm(u)
        v = g.T @ u
        sigma = jnp.linalg.norm(v)
        v = v / sigma
    return w - 0.05 * np.sqrt(g.shape[1] / g.shape[0]) * g / sigma, v


def spectral_tp(bug):
    def f(w, g, v0):
        vn = lambda v: jnp.linalg.norm(v) if bug == "v-norm-local" else snorm(v, "tp")
        v = v0 / vn(v0)
        for _ in range(6):
            u = g @ v if bug == "gv-no-psum" else psum(g @ v, "tp")
            u = u / jnp.linalg.norm(u)
            v = g.T @ u
            sigma = vn(v)
            v = v / sigma
        cols = g.shape[1] * lax.axis_size("tp")
        return w - 0.05 * np.sqrt(cols / g.shape[0]) * g / sigma, v
    return f


C.smap("s.spectral_norm_power_iteration_update.tp4", {"tp": 4}, spectral_tp, (P(None, "tp"), P(None, "tp"), P("tp")),
       (P(None, "tp"), P("tp")), spectral_update, (R(16, 32, scale=0.3), R(16, 32), R(32)),
       bugs=[("gv-no-psum", ["missing-all-reduce"]), ("v-norm-local", ["missing-all-reduce"])])


# ---------------------------------------------------------------------------
# 19. DoG (distance over gradients), a parameter-free step size from global
#     quantities: r = max(r, |x - x0|), G += |g|^2, x -= r / sqrt(G) g, on
#     parameters partly over tp (the weight's rows) and partly replicated (a
#     bias): the squared norms psum'd for the weight only.
def dog(p, p0, g, r, gsum):
    dist = optax.global_norm(jax.tree.map(jnp.subtract, p, p0))
    r = jnp.maximum(r, dist)
    gsum = gsum + optax.tree_utils.tree_norm(g, squared=True)
    eta = r / jnp.sqrt(gsum)
    return jax.tree.map(lambda w, d: w - eta * d, p, g), r, gsum


def dog_tp(bug):
    def f(p, p0, g, r, gsum):
        dw = jnp.sum((p["w"] - p0["w"]) ** 2)
        db = jnp.sum((p["b"] - p0["b"]) ** 2)
        d2 = (dw if bug == "dist-local" else psum(dw, "tp")) + db
        gw = jnp.sum(g["w"] ** 2)
        if bug == "gnorm-bias-in-psum":
            g2 = psum(gw + jnp.sum(g["b"] ** 2), "tp")
        else:
            g2 = psum(gw, "tp") + jnp.sum(g["b"] ** 2)
        r = jnp.maximum(r, jnp.sqrt(d2))
        gsum = gsum + g2
        eta = r / jnp.sqrt(gsum)
        return jax.tree.map(lambda w, d: w - eta * d, p, g), r, gsum
    return f


dg_ps = {"w": P("tp"), "b": P()}
dg_p0 = {"w": R(32, 8, scale=0.3), "b": R(8, scale=0.3)}
dg_p = {k: a + R(*a.shape, scale=0.05) for k, a in dg_p0.items()}
C.smap("s.dog_distance_over_gradients_mixed.tp4", {"tp": 4}, dog_tp, (dg_ps, dg_ps, dg_ps, P(), P()),
       (dg_ps, P(), P()), dog,
       (dg_p, dg_p0, {"w": R(32, 8), "b": R(8, scale=3.0)}, np.float32(0.1), np.float32(20.0)),
       bugs=[("dist-local", ["missing-all-reduce"]), ("gnorm-bias-in-psum", ["wrong-collective-group"])])


# ---------------------------------------------------------------------------
# 20. an EMA of replicated parameters kept sharded (ZeRO-style) over the
#     tuple (dp, fsdp): each device updates the chunk of the flattened
#     parameters at its linear index idx(dp) * |fsdp| + idx(fsdp), with the
#     warmup decay min(0.999, (1 + t) / (10 + t)); the EMA is all_gathered
#     over the tuple for evaluation.
def ema_eval(flat, ema, t):
    decay = jnp.minimum(0.999, (1.0 + t) / (10.0 + t))
    ema = decay * ema + (1 - decay) * flat
    return ema, ema


def ema_sharded(bug):
    def f(flat, ema, t):
        decay = jnp.minimum(0.999, (1.0 + t) / (10.0 + t))
        if bug == "chunk-index-axes-swapped":
            k = idx("fsdp") * lax.axis_size("dp") + idx("dp")
        else:
            k = idx("dp") * lax.axis_size("fsdp") + idx("fsdp")
        mine = lax.dynamic_slice_in_dim(flat, k * ema.shape[0], ema.shape[0])
        ema = decay * ema + (1 - decay) * mine
        full = lax.all_gather(ema, ("fsdp", "dp") if bug == "gather-axes-swapped" else ("dp", "fsdp"), tiled=True)
        return ema, full
    return f


C.smap("s.ema_zero_sharded_shadow_tuple_index.dp2xfsdp2", {"dp": 2, "fsdp": 2}, ema_sharded,
       (P(), P(("dp", "fsdp")), P()), (P(("dp", "fsdp")), P()), ema_eval, (R(64), R(64), np.float32(7.0)),
       bugs=[("chunk-index-axes-swapped", ["wrong-permutation"]), ("gather-axes-swapped", ["wrong-permutation"])])


# ---------------------------------------------------------------------------
# 21. gradient centralisation before optax.adam, for a weight whose input
#     (row) dim is over fsdp: the gradient's mean over its input dim (a pmean
#     of the local column means) subtracted, then optax.adam run on the
#     shard (elementwise, so correct per shard).
gc_opt = optax.adam(0.05)


def gc_adam(w, g, st):
    g = g - jnp.mean(g, axis=0, keepdims=True)
    u, st = gc_opt.update(g, st, w)
    return optax.apply_updates(w, u), st


def gc_fsdp(bug):
    def f(w, g, st):
        if bug == "mean-local-rows":
            mu = jnp.mean(g, axis=0, keepdims=True)
        elif bug == "mean-over-out-dim":
            mu = jnp.mean(g, axis=1, keepdims=True)
        else:
            mu = pmean(jnp.mean(g, axis=0, keepdims=True), "fsdp")
        u, st = gc_opt.update(g - mu, st, w)
        return optax.apply_updates(w, u), st
    return f


gc_w = R(64, 16, scale=0.4)
gc_st = np_tree(gc_opt.init(gc_w))
gc_st = (gc_st[0]._replace(count=np.int32(4), mu=R(64, 16, scale=0.1), nu=np.abs(R(64, 16, scale=0.1))),) + gc_st[1:]
gc_sts = jax.tree.map(lambda a: P("fsdp") if np.ndim(a) == 2 else P(), gc_st)
C.smap("s.grad_centralization_optax_adam_rows.fsdp4", {"fsdp": 4}, gc_fsdp, (P("fsdp"), P("fsdp"), gc_sts),
       (P("fsdp"), gc_sts), gc_adam, (gc_w, R(64, 16) + R(1, 16) * 2.0, gc_st),
       bugs=[("mean-local-rows", ["missing-all-reduce"]), ("mean-over-out-dim", ["wrong-shard-dim"])])


# ---------------------------------------------------------------------------
# 22. cautious AdamW (C-AdamW): the Adam direction masked where it disagrees
#     in sign with the gradient, rescaled by the mask's mean over the whole
#     weight (pmean over the column shards on tp, a mean over rows locally),
#     decoupled weight decay.
def cautious_adamw(w, g, m, v):
    m = 0.9 * m + 0.1 * g
    v = 0.99 * v + 0.01 * g * g
    u = m / (jnp.sqrt(v) + 1e-8)
    mask = (u * g > 0).astype(u.dtype)
    u = u * mask / jnp.maximum(jnp.mean(mask), 1e-3)
    return w - 0.01 * (u + 0.1 * w), m, v


def cautious_tp(bug):
    def f(w, g, m, v):
        m = 0.9 * m + 0.1 * g
        v = 0.99 * v + 0.01 * g * g
        u = m / (jnp.sqrt(v) + 1e-8)
        mask = (u * g > 0).astype(u.dtype)
        frac = {"mask-mean-local": jnp.mean, "mask-mean-psum": lambda a: psum(jnp.mean(a), "tp")}.get(
            bug, lambda a: pmean(jnp.mean(a), "tp"))(mask)
        u = u * mask / jnp.maximum(frac, 1e-3)
        return w - 0.01 * (u + 0.1 * w), m, v
    return f


ca_g = R(16, 64)
ca_m = (R(16, 64) * np.linspace(-0.6, 1.0, 64, dtype=np.float32)[None, :]).astype(np.float32)
C.smap("s.cautious_adamw_mask_mean_cols.tp4", {"tp": 4}, cautious_tp, (P(None, "tp"),) * 4, (P(None, "tp"),) * 3,
       cautious_adamw, (R(16, 64, scale=0.4), ca_g, ca_m, np.abs(R(16, 64)) + 0.1),
       bugs=[("mask-mean-local", ["missing-all-reduce"]), ("mask-mean-psum", ["wrong-collective-op"])])

# ===========================================================================
# GSPMD pairs: jax.jit with in / out shardings (correct programs).
def wsc(mesh, a, *spec):
    return lax.with_sharding_constraint(a, NamedSharding(make_mesh(mesh), P(*spec)))


# 23. a Muon step on a weight over fsdp x tp: the Newton-Schulz iterate and
#     the Gram matrix constrained (X over both axes, A = X X^T replicated).
M2 = {"fsdp": 2, "tp": 4}


def muon_wsc_step(w, g, mom):
    a, b, c = NS_ABC
    mom = MU_BETA * mom + g
    x = g + MU_BETA * mom
    x = x / (jnp.linalg.norm(x) + 1e-7)
    for _ in range(5):
        x = wsc(M2, x, "fsdp", "tp")
        A = wsc(M2, x @ x.T, None, None)
        x = a * x + (b * A + c * A @ A) @ x
    return w - MU_LR * (x + MU_WD * w), mom


C.gspmd("g.muon_ns_constrained_fsdp_tp.fsdp2xtp4", M2, (P("fsdp", "tp"),) * 3, (P("fsdp", "tp"),) * 2,
        muon_wsc_step, (R(32, 64, scale=0.3), R(32, 64), R(32, 64, scale=0.5)))

# 24. Shampoo on both weights of a tanh MLP in a training step (weights over
#     tp, batch over dp): factors accumulated, inverse 4th roots by eigh,
#     the direction grafted to the layer's SGD norm.
sh_layers = ("w1", "w2")


def shampoo_mlp_step(p, ls, rs, x, y):
    g = jax.grad(lambda p: mse(jnp.tanh(x @ p["w1"]) @ p["w2"], y))(p)
    new_p, new_l, new_r = {}, {}, {}
    for k in sh_layers:
        l = ls[k] + g[k] @ g[k].T
        r = rs[k] + g[k].T @ g[k]
        d = sym_inv_root(l, 4, SH_EPS) @ g[k] @ sym_inv_root(r, 4, SH_EPS)
        d = d * jnp.linalg.norm(g[k]) / jnp.linalg.norm(d)
        new_p[k], new_l[k], new_r[k] = p[k] - 0.5 * d, l, r
    return new_p, new_l, new_r


sm_ps = {"w1": P(None, "tp"), "w2": P("tp")}
C.gspmd("g.shampoo_eigh_sgd_graft_mlp_step.dp2xtp4", {"dp": 2, "tp": 4},
        (sm_ps, {"w1": P(), "w2": P()}, {"w1": P(), "w2": P()}, P("dp"), P("dp")),
        (sm_ps, {"w1": P(), "w2": P()}, {"w1": P(), "w2": P()}), shampoo_mlp_step,
        ({"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3)}, {"w1": spd(16), "w2": spd(32)},
         {"w1": spd(32), "w2": spd(8)}, R(16, 16), R(16, 8)))

# 25. the SOAP step of 7. under GSPMD, the weight, gradient and moments over
#     tp by columns, the factors and bases replicated.
C.gspmd("g.soap_step_cols.tp4", {"tp": 4}, (P(None, "tp"),) * 4 + (P(),) * 4, (P(None, "tp"),) * 3 + (P(),) * 4,
        soap_step, so_args)

# 26. the K-FAC step of 8. with the batch over dp and the hidden units over
#     tp (W1 by columns, W2 by rows, the factors replicated).
C.gspmd("g.kfac_mlp_step_hidden_tp.dp4xtp2", {"dp": 4, "tp": 2},
        (P(None, "tp"), P("tp")) + (P(),) * 4 + (P("dp"), P("dp")), (P(None, "tp"), P("tp")) + (P(),) * 4,
        kfac_step, kf_args)

# 27. optax.lamb with a weight-decay mask (matrices only) in a training step
#     of the gain-scaled MLP of 12. on fsdp x tp, batch over fsdp.
lamb_opt = optax.lamb(0.01, weight_decay=0.01, mask=lambda p: jax.tree.map(lambda a: a.ndim == 2, p))


def optax_lamb_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(clip_mlp(p, x), y))(p)
    u, st = lamb_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


ol_ps = {"w1": P("fsdp", "tp"), "b1": P("tp"), "w2": P("tp", "fsdp"), "gain": P()}
ol_st = np_tree(lamb_opt.init(cl_p))
C.gspmd("g.optax_lamb_masked_mlp_step.fsdp2xtp4", M2, (ol_ps, state_specs(ol_st, ol_ps), P("fsdp"), P("fsdp")),
        (ol_ps, state_specs(ol_st, ol_ps), P()), optax_lamb_step, (cl_p, ol_st, R(16, 16), R(16, 16)))

# 28. the Hessian-free step of 15. (ravel_pytree, jvp / vjp, CG in a
#     fori_loop) with the batch over dp and the hidden units over tp.
C.gspmd("g.hessian_free_cg_hidden_tp.dp4xtp2", {"dp": 4, "tp": 2},
        ({"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}, P("dp"), P("dp")),
        {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp")}, hf_step, (hf_p, R(32, 8), R(32, 4)))

# 29. three iterations of optax.lbfgs (zoom line search, value and gradient
#     reused from the state) on an l2-regularised logistic regression whose
#     features are over fsdp.
lbfgs_opt = optax.lbfgs(memory_size=4)


def logreg(w, x, t):
    z = x @ w
    return jnp.mean(jax.nn.softplus(z) - t * z) + 0.01 * jnp.sum(w * w)


def lbfgs_iters(w, x, t):
    f = lambda w: logreg(w, x, t)
    vg = optax.value_and_grad_from_state(f)
    st = lbfgs_opt.init(w)
    for _ in range(3):
        v, g = vg(w, state=st)
        u, st = lbfgs_opt.update(g, st, w, value=v, grad=g, value_fn=f)
        w = optax.apply_updates(w, u)
    return w, f(w)


C.gspmd("g.optax_lbfgs_zoom_logreg_features.fsdp4", {"fsdp": 4}, (P("fsdp"), P(None, "fsdp"), P()), (P("fsdp"), P()),
        lbfgs_iters, (R(32, scale=0.1), R(24, 32), (R(24) > 0).astype(np.float32)))

# 30. optax.contrib.prodigy (its distance estimate from inner products over
#     all parameters) in a training step of the Megatron MLP of 13.
prod_opt = optax.contrib.prodigy(1.0)


def prodigy_step(p, st, x, y):
    lv, g = jax.value_and_grad(lambda p: mse(sam_mlp(p, x), y))(p)
    u, st = prod_opt.update(g, st, p)
    return optax.apply_updates(p, u), st, lv


pr_p = {"w1": R(16, 32, scale=0.4), "w2": R(32, 8, scale=0.3), "b2": R(8, scale=0.5)}
pr_st = np_tree(prod_opt.init(pr_p))
C.gspmd("g.optax_prodigy_megatron_mlp_step.dp2xtp4", {"dp": 2, "tp": 4},
        (sam_ps, state_specs(pr_st, sam_ps), P("dp"), P("dp")), (sam_ps, state_specs(pr_st, sam_ps), P()),
        prodigy_step, (pr_p, pr_st, R(16, 16), R(16, 8)))

# 31. the SAM step of 13. under GSPMD.
C.gspmd("g.sam_step_megatron_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (sam_ps, P("dp"), P("dp")), sam_ps, sam_step,
        (pr_p, R(16, 16), R(16, 8)))

# 32. the Sophia-H step of 16. (jvp of grad) under GSPMD.
C.gspmd("g.sophia_jvp_grad_step.dp2xtp4", {"dp": 2, "tp": 4}, (sp_ps,) * 4 + (P("dp"), P("dp")), (sp_ps,) * 3,
        sophia_step, (sp_p, sp_z, sp_m, sp_h, R(16, 16), R(16, 8)))

# 33. Adafactor of 11. with the weight's rows over fsdp and columns over tp.
C.gspmd("g.adafactor_factored_2d.fsdp2xtp4", M2, (P("fsdp", "tp"), P("fsdp", "tp"), P("fsdp"), P("tp")),
        (P("fsdp", "tp"), P("fsdp"), P("tp")), adafactor,
        (R(32, 64, scale=0.5), R(32, 64) * np.linspace(0.2, 3.0, 32, dtype=np.float32)[:, None],
         np.abs(R(32)) + 0.1, np.abs(R(64)) + 0.1))

# 34. cautious AdamW of 22. with the weight over fsdp x tp.
C.gspmd("g.cautious_adamw_2d.fsdp2xtp4", M2, (P("fsdp", "tp"),) * 4, (P("fsdp", "tp"),) * 3, cautious_adamw,
        (R(32, 64, scale=0.4), R(32, 64), R(32, 64) * np.linspace(-0.6, 1.0, 64, dtype=np.float32)[None, :],
         np.abs(R(32, 64)) + 0.1))

MISS_GRAFT = ("the rules name the local graft norm (a missing all-reduce), but on random inputs, whose blocks share one scale, the grafted update comes out the same, so execution contradicts them and nothing is decided (the generator's inputs give the blocks different scales)")
C.known_miss("s.shampoo_blocked_newton_adagrad_graft.fsdp4.bug.graft-norm-local", MISS_GRAFT)
C.known_miss("s.shampoo_blocked_newton_adagrad_graft.fsdp4.bug.graft-pmean-of-norms", MISS_GRAFT)
C.finish()
