"""samples/fresh5: a fifth batch of programs as a user writes them, all of
them whole training steps (forward, loss, backward, optimizer update), none
of them an idiom of samples/fresh, fresh2, fresh3, fresh4, probe, train or
wild: a transformer block step with AdamW (weight-decay mask) under dp x tp
with check_vma=True, a classifier with z-loss and clipping by global norm
(manual pmean), hand-written FSDP (all_gather of the parameters,
psum_scatter of the gradients) with Nesterov momentum, gradient accumulation
over micro-batches in a lax.scan, a symmetric InfoNCE loss with all-gathered
embeddings, top-1 expert parallelism with a psum combine, a
sequence-parallel LayerNorm regression, a GRU trained by BPTT, a VAE on a
2-D data-parallel mesh, a padding-masked classifier, a Megatron MLP with a
replicated bias sliced by axis_index, a warmup-cosine schedule driven by a
step counter, tied embeddings over a vocab-parallel table, and under GSPMD
a tied-embedding LM step with z-loss and label smoothing, Adafactor with an
EMA, a GRU with Lion, a bf16 VAE with Adam and a dense top-1 MoE.
Each shard_map family has the bug variants a careless parallelisation makes.
Exported with scalify_jax.export_pair; every pair is also run by JAX on seeded
inputs and its manifest entry records the largest difference from the
single-device run ("numerics").
Run from the repository root: bash samples/gen/run_fresh5.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
from scalify_jax._export import make_mesh
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh5.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

C = Corpus("samples/fresh5", "samples/gen/fresh5.py", "samples/gen/run_fresh5.sh", sys.argv[1:])
rng, R, I = seeded(5151)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index


def state_specs(state, params, spec):
    """PartitionSpecs for an optax state: the subtrees shaped like params
    (mu, nu, momentum traces) get the parameters' specs, the rest P()."""
    pdef = jax.tree.structure(params)
    shapes = [np.shape(a) for a in pdef.flatten_up_to(params)]
    specs = pdef.flatten_up_to(spec)

    def sub(s):
        if jax.tree.structure(s) != pdef:
            return P()
        return jax.tree.unflatten(pdef, [sp if np.shape(a) == sh else P()
                                         for a, sh, sp in zip(pdef.flatten_up_to(s), shapes, specs)])
    return jax.tree.map(sub, state, is_leaf=lambda s: jax.tree.structure(s) == pdef)


def sgd(p, g, lr):
    return jax.tree.map(lambda w, d: w - lr * d, p, g)


def rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def ln(x, g, b):
    m = jnp.mean(x, -1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), -1, keepdims=True)
    return (x - m) * lax.rsqrt(v + 1e-5) * g + b


def causal(s):
    t = s.shape[-1]
    return jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)


# ---------------------------------------------------------------------------
# 1. a pre-norm transformer block trained with AdamW (no decay on the norm
#    scales and bias) on dp x tp, check_vma=True: heads and the MLP hidden
#    dim over tp, the batch over dp; jax.grad sums the replicated parameters'
#    gradients itself, the loss is the local sum over the global count.
TB_E = 4
TB_OPT = optax.adamw(1e-2, weight_decay=0.1, mask=lambda p: {k: p[k].ndim > 1 for k in p})


def tblock(p, x, red=lambda v: v, bias_in=False):
    h = rms(x, p["g1"])
    q, k, v = jnp.einsum("btd,dkhe->kbthe", h, p["wqkv"])
    s = causal(jnp.einsum("bqhe,bshe->bhqs", q, k) * TB_E ** -0.5)
    o = jnp.einsum("bhqs,bshe->bqhe", jax.nn.softmax(s, -1), v)
    x = x + red(jnp.einsum("bqhe,hed->bqd", o, p["wo"]))
    m = jax.nn.gelu(rms(x, p["g2"]) @ p["w1"]) @ p["w2"]
    return x + red(m + p["b2"]) if bias_in else x + red(m) + p["b2"]


def tb_step(p, opt, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.mean((tblock(p, x) - y) ** 2))(p)
    upd, opt = TB_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, loss


def tb_dptp(bug):
    def f(p, opt, x, y):
        n = y.size if bug == "local-denominator" else y.size * lax.axis_size("dp")

        def loss(p):
            out = tblock(p, x, lambda v: psum(v, "tp"), bias_in=bug == "bias-in-psum")
            return jnp.sum((out - y) ** 2) / n
        l, g = jax.value_and_grad(loss)(p)
        upd, opt = TB_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, psum(l, "dp")
    return f


tb_p = {"wqkv": R(16, 3, 4, TB_E, scale=0.3), "wo": R(4, TB_E, 16, scale=0.3), "w1": R(16, 32, scale=0.3),
        "w2": R(32, 16, scale=0.2), "g1": 1.0 + R(16, scale=0.1), "g2": 1.0 + R(16, scale=0.1), "b2": R(16, scale=0.1)}
tb_spec = {"wqkv": P(None, None, "tp"), "wo": P("tp"), "w1": P(None, "tp"), "w2": P("tp"),
           "g1": P(), "g2": P(), "b2": P()}
tb_opt = TB_OPT.init(tb_p)
tb_ospec = state_specs(tb_opt, tb_p, tb_spec)
C.smap("s.tblock_adamw_vma.dp2xtp4", {"dp": 2, "tp": 4}, tb_dptp, (tb_spec, tb_ospec, P("dp"), P("dp")),
       (tb_spec, tb_ospec, P()), tb_step, (tb_p, tb_opt, R(4, 8, 16), R(4, 8, 16)),
       bugs=[("bias-in-psum", ["wrong-reduction"]), ("local-denominator", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 2. an MLP classifier (integer labels) with a z-loss, gradients averaged by
#    hand over dp (check_vma=False), then clip by global norm and SGD with
#    momentum from optax; the step also reports the gradient norm.
ZC_Z = 1e-2
ZC_OPT = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.1, momentum=0.9))


def zc_loss(p, x, lab):
    z = jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    lse = jax.nn.logsumexp(z, -1)
    nll = lse - jnp.take_along_axis(z, lab[:, None], -1)[:, 0]
    return jnp.mean(nll + ZC_Z * lse ** 2)


def zc_step(p, opt, x, lab):
    l, g = jax.value_and_grad(zc_loss)(p, x, lab)
    upd, opt = ZC_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l, optax.global_norm(g)


def zc_dp(bug):
    def f(p, opt, x, lab):
        l, g = jax.value_and_grad(zc_loss)(p, x, lab)
        if bug == "clip-local":
            g = optax.clip_by_global_norm(1.0).update(g, optax.EmptyState())[0]
        g = jax.tree.map(lambda v: psum(v, "dp") if bug == "psum-grads" else pmean(v, "dp"), g)
        upd, opt = ZC_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, pmean(l, "dp"), optax.global_norm(g)
    return f


zc_p = {"w1": R(12, 16, scale=0.5), "b1": R(16, scale=0.1), "w2": R(16, 10, scale=0.5), "b2": R(10, scale=0.1)}
zc_spec = jax.tree.map(lambda _: P(), zc_p)
zc_opt = ZC_OPT.init(zc_p)
zc_ospec = state_specs(zc_opt, zc_p, zc_spec)
C.smap("s.xent_zloss_clip.dp4", {"dp": 4}, zc_dp, (zc_spec, zc_ospec, P("dp"), P("dp")),
       (zc_spec, zc_ospec, P(), P()), zc_step, (zc_p, zc_opt, R(16, 12), I(0, 10, 16)),
       bugs=[("clip-local", ["missing-all-reduce"]), ("psum-grads", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. FSDP written by hand (check_vma=False): parameter rows sharded over
#    fsdp, all-gathered for the step, the gradient of the gathered parameters
#    reduce-scattered back to rows and divided by the device count; decoupled
#    weight decay and Nesterov momentum from optax on the shards.
FS_OPT = optax.chain(optax.add_decayed_weights(1e-2), optax.sgd(0.05, momentum=0.9, nesterov=True))


def fs_loss(p, x, y):
    return jnp.mean((jax.nn.gelu(x @ p["w1"]) @ p["w2"] - y) ** 2)


def fs_step(p, opt, x, y):
    l, g = jax.value_and_grad(fs_loss)(p, x, y)
    upd, opt = FS_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


def fs_fsdp(bug):
    def f(p, opt, x, y):
        full = jax.tree.map(lambda w: lax.all_gather(w, "fsdp", axis=0, tiled=True), p)
        l, g = jax.value_and_grad(fs_loss)(full, x, y)
        n = 1 if bug == "no-divide" else lax.axis_size("fsdp")
        g = jax.tree.map(lambda v: lax.psum_scatter(v, "fsdp", scatter_dimension=0, tiled=True) / n, g)
        upd, opt = FS_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, l if bug == "loss-local" else pmean(l, "fsdp")
    return f


fs_p = {"w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.3)}
fs_spec = {"w1": P("fsdp"), "w2": P("fsdp")}
fs_opt = FS_OPT.init(fs_p)
fs_ospec = state_specs(fs_opt, fs_p, fs_spec)
C.smap("s.fsdp_manual_nesterov.fsdp4", {"fsdp": 4}, fs_fsdp, (fs_spec, fs_ospec, P("fsdp"), P("fsdp")),
       (fs_spec, fs_ospec, P()), fs_step, (fs_p, fs_opt, R(16, 16), R(16, 16)),
       bugs=[("no-divide", ["wrong-reduction"]), ("loss-local", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. gradient accumulation over two micro-batches per device in a lax.scan,
#    check_vma=True: each micro-batch loss is its sum over the global count,
#    so the accumulated (auto-psummed) gradient is the full-batch gradient.
GA_MB = 2


def ga_sq(p, x, y):
    return jnp.square(jnp.tanh(x @ p["w"] + p["b"]) @ p["v"] - y)


def ga_step(p, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(ga_sq(p, x, y)))(p)
    return sgd(p, g, 0.2), l


def ga_dp(bug):
    def f(p, x, y):
        nglob = y.size * lax.axis_size("dp")
        xs = x.reshape(GA_MB, -1, x.shape[-1])
        ys = y.reshape(GA_MB, -1, y.shape[-1])

        def micro(carry, xy):
            gacc, lacc = carry
            xm, ym = xy
            if bug == "micro-mean":
                l, g = jax.value_and_grad(lambda p: jnp.mean(ga_sq(p, xm, ym)))(p)
            else:
                l, g = jax.value_and_grad(lambda p: jnp.sum(ga_sq(p, xm, ym)) / nglob)(p)
            return (jax.tree.map(jnp.add, gacc, g), lacc + psum(l, "dp")), None
        (g, l), _ = lax.scan(micro, (jax.tree.map(jnp.zeros_like, p), jnp.zeros((), jnp.float32)), (xs, ys))
        if bug == "extra-divide":
            g = jax.tree.map(lambda v: v / lax.axis_size("dp"), g)
        return sgd(p, g, 0.2), l
    return f


ga_p = {"w": R(8, 16, scale=0.4), "b": R(16, scale=0.1), "v": R(16, 4, scale=0.4)}
ga_spec = jax.tree.map(lambda _: P(), ga_p)
C.smap("s.grad_accum_scan_vma.dp4", {"dp": 4}, ga_dp, (ga_spec, P("dp"), P("dp")), (ga_spec, P()), ga_step,
       (ga_p, R(32, 8), R(32, 4)),
       bugs=[("micro-mean", ["wrong-reduction"]), ("extra-divide", ["constant-mismatch"])], check_vma=True)

# ---------------------------------------------------------------------------
# 5. a CLIP-style symmetric InfoNCE step (check_vma=True): both towers'
#    normalised embeddings all-gathered over dp, each device scores its own
#    rows against the global batch; the positives sit at the global row index.
NC_T = 0.1


def nc_embed(x, w):
    z = x @ w
    return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def nc_ce(lg, lab):
    return jax.nn.logsumexp(lg, -1) - jnp.take_along_axis(lg, lab[:, None], -1)[:, 0]


def nc_step(p, xi, xt):
    def loss(p):
        zi, zt = nc_embed(xi, p["wi"]), nc_embed(xt, p["wt"])
        lg = zi @ zt.T / NC_T
        lab = jnp.arange(zi.shape[0])
        return (jnp.mean(nc_ce(lg, lab)) + jnp.mean(nc_ce(lg.T, lab))) / 2
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, 0.5), l


def nc_dp(bug):
    def f(p, xi, xt):
        nl = xi.shape[0]
        den = nl if bug == "local-mean" else nl * lax.axis_size("dp")

        def loss(p):
            zi, zt = nc_embed(xi, p["wi"]), nc_embed(xt, p["wt"])
            zi_all = lax.all_gather(zi, "dp", tiled=True)
            zt_all = lax.all_gather(zt, "dp", tiled=True)
            lab = jnp.arange(nl) + (0 if bug == "label-no-offset" else idx("dp") * nl)
            a = nc_ce(zi @ zt_all.T / NC_T, lab)
            b = nc_ce(zt @ zi_all.T / NC_T, lab)
            return (jnp.sum(a) + jnp.sum(b)) / (2 * den)
        l, g = jax.value_and_grad(loss)(p)
        return sgd(p, g, 0.5), psum(l, "dp")
    return f


nc_p = {"wi": R(16, 8, scale=0.3), "wt": R(12, 8, scale=0.3)}
C.smap("s.infonce_allgather_vma.dp4", {"dp": 4}, nc_dp, ({"wi": P(), "wt": P()}, P("dp"), P("dp")),
       ({"wi": P(), "wt": P()}, P()), nc_step, (nc_p, R(16, 16), R(16, 12)),
       bugs=[("label-no-offset", ["wrong-shard-dim"]), ("local-mean", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 6. a top-1 mixture of experts trained with SGD on dp x ep (check_vma=True):
#    tokens over dp (replicated over ep), each ep device holds one expert and
#    adds the tokens routed to it, combined by a psum over ep; the router's
#    gradient is summed by autodiff.
MO_E = 4


def mo_expert(w1, w2, x):
    return jax.nn.gelu(x @ w1) @ w2


def mo_route(p, x):
    gate = jax.nn.softmax(x @ p["wg"], -1)
    return jnp.argmax(gate, -1), jnp.max(gate, -1)


def mo_step(p, x, y):
    def loss(p):
        e, gv = mo_route(p, x)
        out = sum(jnp.where((e == j)[:, None], gv[:, None] * mo_expert(p["w1"][j], p["w2"][j], x), 0.0)
                  for j in range(MO_E))
        return jnp.mean((x + out - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, 0.2), l


def mo_dpep(bug):
    def f(p, x, y):
        n = y.size * lax.axis_size("dp")
        me = 0 if bug == "expert-no-offset" else idx("ep")
        comb = pmean if bug == "pmean-combine" else psum

        def loss(p):
            e, gv = mo_route(p, x)
            mine = jnp.where((e == me)[:, None], gv[:, None] * mo_expert(p["w1"][0], p["w2"][0], x), 0.0)
            return jnp.sum((x + comb(mine, "ep") - y) ** 2) / n
        l, g = jax.value_and_grad(loss)(p)
        return sgd(p, g, 0.2), psum(l, "dp")
    return f


mo_spec = {"wg": P(), "w1": P("ep"), "w2": P("ep")}
C.smap("s.moe_top1_psum_vma.dp2xep4", {"dp": 2, "ep": 4}, mo_dpep, (mo_spec, P("dp"), P("dp")), (mo_spec, P()),
       mo_step, ({"wg": R(8, MO_E), "w1": R(MO_E, 8, 16, scale=0.4), "w2": R(MO_E, 16, 8, scale=0.4)},
                 R(16, 8), R(16, 8)),
       bugs=[("expert-no-offset", ["wrong-shard-dim"]), ("pmean-combine", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 7. a sequence-parallel LayerNorm + projection regression with decoupled
#    weight decay (check_vma=True): the sequence over sp, parameters
#    replicated, the loss the local sum over the global token count.
SL_WD = 1e-2


def sl_sq(p, x, y):
    return jnp.square(ln(x, p["g"], p["b"]) @ p["w"] + p["c"] - y)


def sl_step(p, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean(sl_sq(p, x, y)))(p)
    return jax.tree.map(lambda w, d: w - 0.1 * (d + SL_WD * w), p, g), l


def sl_sp(bug):
    def f(p, x, y):
        n = y.size if bug == "local-token-mean" else y.size * lax.axis_size("sp")
        l, g = jax.value_and_grad(lambda p: jnp.sum(sl_sq(p, x, y)) / n)(p)
        if bug == "pmean-grads-again":
            g = jax.tree.map(lambda v: v / lax.axis_size("sp"), g)
        return jax.tree.map(lambda w, d: w - 0.1 * (d + SL_WD * w), p, g), psum(l, "sp")
    return f


sl_p = {"g": 1.0 + R(8, scale=0.1), "b": R(8, scale=0.1), "w": R(8, 8, scale=0.4), "c": R(8, scale=0.1)}
sl_spec = jax.tree.map(lambda _: P(), sl_p)
C.smap("s.seqpar_ln_regress_vma.sp4", {"sp": 4}, sl_sp, (sl_spec, P(None, "sp"), P(None, "sp")), (sl_spec, P()),
       sl_step, (sl_p, R(2, 16, 8), R(2, 16, 8)),
       bugs=[("local-token-mean", ["wrong-reduction"]), ("pmean-grads-again", ["constant-mismatch"])],
       check_vma=True)

# ---------------------------------------------------------------------------
# 8. a GRU trained by backpropagation through time (lax.scan over the time
#    axis), the batch over dp (check_vma=False): gradients pmean'd by hand,
#    Nesterov SGD from optax.
GR_H = 8
GR_OPT = optax.sgd(0.1, momentum=0.9, nesterov=True)


def gru(p, xs):
    def cell(h, x):
        zr = jax.nn.sigmoid(x @ p["wx"][:, :2 * GR_H] + h @ p["wh"][:, :2 * GR_H] + p["b"][:2 * GR_H])
        z, r = zr[:, :GR_H], zr[:, GR_H:]
        c = jnp.tanh(x @ p["wx"][:, 2 * GR_H:] + (r * h) @ p["wh"][:, 2 * GR_H:] + p["b"][2 * GR_H:])
        return (1 - z) * c + z * h, None
    h, _ = lax.scan(cell, jnp.zeros((xs.shape[1], GR_H), xs.dtype), xs)
    return h @ p["wo"]


def gr_step(p, opt, xs, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean((gru(p, xs) - y) ** 2))(p)
    upd, opt = GR_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


def gr_dp(bug):
    def f(p, opt, xs, y):
        l, g = jax.value_and_grad(lambda p: jnp.mean((gru(p, xs) - y) ** 2))(p)
        if bug == "psum-grads":
            g = jax.tree.map(lambda v: psum(v, "dp"), g)
        elif bug != "no-pmean":
            g = jax.tree.map(lambda v: pmean(v, "dp"), g)
        upd, opt = GR_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, pmean(l, "dp")
    return f


gr_p = {"wx": R(4, 3 * GR_H, scale=0.4), "wh": R(GR_H, 3 * GR_H, scale=0.3), "b": R(3 * GR_H, scale=0.1),
        "wo": R(GR_H, 2, scale=0.4)}
gr_spec = jax.tree.map(lambda _: P(), gr_p)
gr_opt = GR_OPT.init(gr_p)
gr_ospec = state_specs(gr_opt, gr_p, gr_spec)
C.smap("s.gru_bptt_pmean.dp8", {"dp": 8}, gr_dp, (gr_spec, gr_ospec, P(None, "dp"), P("dp")),
       (gr_spec, gr_ospec, P()), gr_step, (gr_p, gr_opt, R(6, 16, 4), R(16, 2)),
       bugs=[("no-pmean", ["missing-all-reduce"]), ("psum-grads", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 9. a VAE step on a 2-D mesh used as one data-parallel group (the batch
#    over dp and mp together, check_vma=False): reparameterisation noise from
#    the data, reconstruction + KL, gradients pmean'd over both axes.
VA_OPT = optax.sgd(0.05, momentum=0.9)


def va_loss(p, x, eps):
    h = jnp.tanh(x @ p["we"] + p["be"])
    mu, lv = h @ p["wm"], h @ p["wv"]
    z = mu + jnp.exp(0.5 * lv) * eps
    xr = jnp.tanh(z @ p["wd1"]) @ p["wd2"] + p["bd"]
    rec = jnp.sum((xr - x) ** 2, -1)
    kl = -0.5 * jnp.sum(1 + lv - mu ** 2 - jnp.exp(lv), -1)
    return jnp.mean(rec + kl)


def va_step(p, opt, x, eps):
    l, g = jax.value_and_grad(va_loss)(p, x, eps)
    upd, opt = VA_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


def va_dpmp(bug):
    def f(p, opt, x, eps):
        l, g = jax.value_and_grad(va_loss)(p, x, eps)
        g = jax.tree.map(lambda v: pmean(v, "dp" if bug == "pmean-dp-only" else ("dp", "mp")), g)
        upd, opt = VA_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, psum(l, ("dp", "mp")) if bug == "loss-psum" else pmean(l, ("dp", "mp"))
    return f


va_p = {"we": R(12, 16, scale=0.3), "be": R(16, scale=0.1), "wm": R(16, 4, scale=0.3), "wv": R(16, 4, scale=0.2),
        "wd1": R(4, 16, scale=0.3), "wd2": R(16, 12, scale=0.3), "bd": R(12, scale=0.1)}
va_spec = jax.tree.map(lambda _: P(), va_p)
va_opt = VA_OPT.init(va_p)
va_ospec = state_specs(va_opt, va_p, va_spec)
C.smap("s.vae_step_2d_dp.dp4xmp2", {"dp": 4, "mp": 2}, va_dpmp,
       (va_spec, va_ospec, P(("dp", "mp")), P(("dp", "mp"))), (va_spec, va_ospec, P()), va_step,
       (va_p, va_opt, R(16, 12), R(16, 4)),
       bugs=[("pmean-dp-only", ["wrong-collective-group"]), ("loss-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 10. a linear classifier with padded examples (label -1), the loss the mean
#     over the valid examples of the global batch (check_vma=False): local sums
#     of the loss, its gradient and the valid count, psummed, then divided.
PC_C = 6


def pc_sum(p, x, lab):
    z = x @ p["w"] + p["b"]
    valid = lab >= 0
    nll = jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, jnp.maximum(lab, 0)[:, None], -1)[:, 0]
    return jnp.sum(jnp.where(valid, nll, 0.0)), jnp.sum(valid.astype(jnp.float32))


def pc_step(p, x, lab):
    def loss(p):
        s, n = pc_sum(p, x, lab)
        return s / jnp.maximum(n, 1.0)
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, 0.5), l


def pc_dp(bug):
    def f(p, x, lab):
        (s, n), g = jax.value_and_grad(lambda p: pc_sum(p, x, lab), has_aux=True)(p)
        if bug == "mean-of-means":
            d = jnp.maximum(n, 1.0)
            return sgd(p, jax.tree.map(lambda v: pmean(v / d, "dp"), g), 0.5), pmean(s / d, "dp")
        d = jnp.maximum(n if bug == "count-local" else psum(n, "dp"), 1.0)
        return sgd(p, jax.tree.map(lambda v: psum(v, "dp") / d, g), 0.5), psum(s, "dp") / d
    return f


pc_lab = I(0, PC_C, 16)
pc_lab[:3] = -1  # the first shard is mostly padding
pc_lab[9] = -1
C.smap("s.padded_classifier.dp4", {"dp": 4}, pc_dp, ({"w": P(), "b": P()}, P("dp"), P("dp")),
       ({"w": P(), "b": P()}, P()), pc_step, ({"w": R(8, PC_C, scale=0.4), "b": R(PC_C, scale=0.1)}, R(16, 8), pc_lab),
       bugs=[("count-local", ["missing-all-reduce"])])
# Its bug "mean-of-means" (pmean of per-device means) differs only where the
# devices hold different numbers of real tokens: the checker's seeded inputs
# draw no padding label, so execution cannot show it and withdraws the rules'
# finding (unverified, said loudly); not exported (as fresh3's
# "scale-not-synced").

# ---------------------------------------------------------------------------
# 11. a Megatron MLP with weight decay masked off the biases and momentum
#     (check_vma=True): w1 by columns, w2 by rows over tp; the first bias kept
#     replicated and each device slicing its part at axis_index * width.
MM_OPT = optax.chain(optax.add_decayed_weights(1e-2, mask=lambda p: {k: p[k].ndim == 2 for k in p}),
                     optax.sgd(0.1, momentum=0.9))


def mm_step(p, opt, x, y):
    def loss(p):
        return jnp.mean((jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"] - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    upd, opt = MM_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


def mm_dptp(bug):
    def f(p, opt, x, y):
        n = y.size * lax.axis_size("dp")

        def loss(p):
            fl = p["w1"].shape[1]
            b1 = lax.dynamic_slice_in_dim(p["b1"], 0 if bug == "b1-no-offset" else idx("tp") * fl, fl)
            part = jax.nn.gelu(x @ p["w1"] + b1) @ p["w2"]
            out = psum(part + p["b2"], "tp") if bug == "b2-in-psum" else psum(part, "tp") + p["b2"]
            return jnp.sum((out - y) ** 2) / n
        l, g = jax.value_and_grad(loss)(p)
        upd, opt = MM_OPT.update(g, opt, p)
        return optax.apply_updates(p, upd), opt, psum(l, "dp")
    return f


mm_p = {"w1": R(16, 32, scale=0.3), "b1": R(32, scale=0.2), "w2": R(32, 16, scale=0.3), "b2": R(16, scale=0.1)}
mm_spec = {"w1": P(None, "tp"), "b1": P(), "w2": P("tp"), "b2": P()}
mm_opt = MM_OPT.init(mm_p)
mm_ospec = state_specs(mm_opt, mm_p, mm_spec)
C.smap("s.megatron_mlp_wdmask_vma.dp2xtp4", {"dp": 2, "tp": 4}, mm_dptp, (mm_spec, mm_ospec, P("dp"), P("dp")),
       (mm_spec, mm_ospec, P()), mm_step, (mm_p, mm_opt, R(8, 16), R(8, 16)),
       bugs=[("b1-no-offset", ["wrong-shard-dim"]), ("b2-in-psum", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 12. SGD with momentum by hand and a warmup-cosine learning rate read at a
#     step counter carried in the train state (check_vma=False, dp4).
WC_SCHED = optax.warmup_cosine_decay_schedule(0.0, 0.2, 4, 40)


def wc_loss(p, x, y):
    return jnp.mean((jax.nn.silu(x @ p["w"]) @ p["v"] - y) ** 2)


def wc_step(p, mom, step, x, y):
    l, g = jax.value_and_grad(wc_loss)(p, x, y)
    mom = jax.tree.map(lambda m, d: 0.9 * m + d, mom, g)
    return sgd(p, mom, WC_SCHED(step)), mom, step + 1, l


def wc_dp(bug):
    def f(p, mom, step, x, y):
        l, g = jax.value_and_grad(wc_loss)(p, x, y)
        if bug == "bf16-allreduce":  # halve the gradient traffic
            g = jax.tree.map(lambda v: pmean(v.astype(jnp.bfloat16), "dp").astype(jnp.float32), g)
        else:
            g = jax.tree.map(lambda v: pmean(v, "dp"), g)
        if bug == "step-psum":
            step = psum(step, "dp")
        mom = jax.tree.map(lambda m, d: 0.9 * m + d, mom, g)
        return sgd(p, mom, WC_SCHED(step)), mom, step + 1, pmean(l, "dp")
    return f


wc_p = {"w": R(8, 16, scale=0.4), "v": R(16, 4, scale=0.4)}
wc_mom = {"w": R(8, 16, scale=0.05), "v": R(16, 4, scale=0.05)}
wc_spec = {"w": P(), "v": P()}
C.smap("s.warmup_cosine_counter.dp4", {"dp": 4}, wc_dp, (wc_spec, wc_spec, P(), P("dp"), P("dp")),
       (wc_spec, wc_spec, P(), P()), wc_step, (wc_p, wc_mom, np.int32(2), R(16, 8), R(16, 4)),
       bugs=[("bf16-allreduce", ["dtype-mismatch"]), ("step-psum", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 13. tied input embedding and output head over a vocab-parallel table
#     (check_vma=True): rows of the table over tp, the lookup a one_hot of the
#     shifted ids psummed over tp, the logits of the local vocabulary, a
#     vocab-parallel cross-entropy; the table gets both gradients.
TE_V, TE_D = 32, 8


def te_step(p, tok, tgt):
    def loss(p):
        h = jnp.tanh(p["emb"][tok] @ p["w"])
        z = h @ p["emb"].T
        return jnp.mean(jax.nn.logsumexp(z, -1) - jnp.take_along_axis(z, tgt[..., None], -1)[..., 0])
    l, g = jax.value_and_grad(loss)(p)
    return sgd(p, g, 0.5), l


def te_tp(bug):
    def f(p, tok, tgt):
        def loss(p):
            vl = p["emb"].shape[0]
            off = idx("tp") * vl
            oh = jax.nn.one_hot(tok if bug == "lookup-no-offset" else tok - off, vl)
            e = (pmean if bug == "lookup-pmean" else psum)(oh @ p["emb"], "tp")
            h = jnp.tanh(e @ p["w"])
            z = h @ p["emb"].T
            m = pmax(lax.stop_gradient(jnp.max(z, -1, keepdims=True)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(z - m), -1), "tp")) + m[..., 0]
            tl = psum(jnp.sum(jax.nn.one_hot(tgt - off, vl) * z, -1), "tp")
            return jnp.mean(lse - tl)
        l, g = jax.value_and_grad(loss)(p)
        return sgd(p, g, 0.5), l
    return f


te_spec = {"emb": P("tp"), "w": P()}
C.smap("s.tied_embed_vocab_vma.tp4", {"tp": 4}, te_tp, (te_spec, P(), P()), (te_spec, P()), te_step,
       ({"emb": R(TE_V, TE_D, scale=0.5), "w": R(TE_D, TE_D, scale=0.5)}, I(0, TE_V, 4, 6), I(0, TE_V, 4, 6)),
       bugs=[("lookup-no-offset", ["wrong-shard-dim"]), ("lookup-pmean", ["wrong-reduction"])], check_vma=True)

# ---------------------------------------------------------------------------
# 14. GSPMD: a tied-embedding LM step (causal attention, MLP, label-smoothed
#     cross-entropy with a z-loss), clip by global norm and AdamW with decay
#     only on the matrices; activations constrained to (dp, ., tp).
LM_MESH = make_mesh({"dp": 2, "tp": 4})
LM_E, LM_EPS, LM_Z = 4, 0.1, 1e-4
LM_OPT = optax.chain(optax.clip_by_global_norm(1.0),
                     optax.adamw(3e-3, weight_decay=0.1, mask=lambda p: {k: k in ("wqkv", "wo", "w1", "w2") for k in p}))


def lm_c(a, *s):
    return lax.with_sharding_constraint(a, NamedSharding(LM_MESH, P(*s)))


def lm_loss(p, tok, tgt):
    x = lm_c(p["emb"][tok], "dp")
    q, k, v = jnp.einsum("btd,dkhe->kbthe", rms(x, p["g1"]), p["wqkv"])
    q = lm_c(q, "dp", None, "tp")
    s = causal(jnp.einsum("bqhe,bshe->bhqs", q, k) * LM_E ** -0.5)
    o = jnp.einsum("bhqs,bshe->bqhe", jax.nn.softmax(s, -1), v)
    x = lm_c(x + jnp.einsum("bqhe,hed->bqd", o, p["wo"]), "dp")
    h = lm_c(jax.nn.gelu(rms(x, p["g2"]) @ p["w1"]), "dp", None, "tp")
    x = x + h @ p["w2"]
    z = lm_c(rms(x, p["gf"]) @ p["emb"].T, "dp", None, "tp")
    lse = jax.nn.logsumexp(z, -1)
    lp = z - lse[..., None]
    nll = -jnp.take_along_axis(lp, tgt[..., None], -1)[..., 0]
    return jnp.mean((1 - LM_EPS) * nll - LM_EPS * jnp.mean(lp, -1) + LM_Z * lse ** 2)


def lm_step(p, opt, tok, tgt):
    l, g = jax.value_and_grad(lm_loss)(p, tok, tgt)
    upd, opt = LM_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


lm_p = {"emb": R(32, 16, scale=0.5), "wqkv": R(16, 3, 4, LM_E, scale=0.3), "wo": R(4, LM_E, 16, scale=0.3),
        "w1": R(16, 32, scale=0.3), "w2": R(32, 16, scale=0.2), "g1": 1.0 + R(16, scale=0.1),
        "g2": 1.0 + R(16, scale=0.1), "gf": 1.0 + R(16, scale=0.1)}
lm_spec = {"emb": P("tp"), "wqkv": P(None, None, "tp"), "wo": P("tp"), "w1": P(None, "tp"), "w2": P("tp"),
           "g1": P(), "g2": P(), "gf": P()}
lm_opt = LM_OPT.init(lm_p)
lm_ospec = state_specs(lm_opt, lm_p, lm_spec)
C.gspmd("g.lm_tied_zloss_adamw.dp2xtp4", LM_MESH, (lm_spec, lm_ospec, P("dp"), P("dp")), (lm_spec, lm_ospec, P()),
        lm_step, (lm_p, lm_opt, I(0, 32, 4, 8), I(0, 32, 4, 8)))

# ---------------------------------------------------------------------------
# 15. GSPMD: Adafactor with a linear learning-rate schedule and an EMA of the
#     parameters, the parameter rows over fsdp and the batch over fsdp too.
AF_OPT = optax.adafactor(learning_rate=optax.linear_schedule(1e-2, 1e-3, 10), min_dim_size_to_factor=8)


def af_step(p, ema, opt, x, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean((jnp.tanh(x @ p["w1"]) @ p["w2"] + p["b"] - y) ** 2))(p)
    upd, opt = AF_OPT.update(g, opt, p)
    p = optax.apply_updates(p, upd)
    return p, jax.tree.map(lambda e, w: 0.99 * e + 0.01 * w, ema, p), opt, l


af_p = {"w1": R(16, 32, scale=0.3), "w2": R(32, 8, scale=0.3), "b": R(8, scale=0.1)}
af_spec = {"w1": P("fsdp"), "w2": P("fsdp"), "b": P()}
af_opt = AF_OPT.init(af_p)
af_ospec = state_specs(af_opt, af_p, af_spec)
C.gspmd("g.adafactor_ema_sched.fsdp4", {"fsdp": 4}, (af_spec, af_spec, af_ospec, P("fsdp"), P("fsdp")),
        (af_spec, af_spec, af_ospec, P()), af_step,
        (af_p, jax.tree.map(lambda a: a + R(*a.shape, scale=0.01), af_p), af_opt, R(16, 16), R(16, 8)))

# ---------------------------------------------------------------------------
# 16. GSPMD: a GRU step with Lion, the batch over dp and the gate columns of
#     the input and recurrent weights over mp (a 2-D mesh).
GL_OPT = optax.lion(1e-3, weight_decay=1e-2)


def gl_step(p, opt, xs, y):
    l, g = jax.value_and_grad(lambda p: jnp.mean((gru(p, xs) - y) ** 2))(p)
    upd, opt = GL_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


gl_p = {"wx": R(4, 3 * GR_H, scale=0.4), "wh": R(GR_H, 3 * GR_H, scale=0.3), "b": R(3 * GR_H, scale=0.1),
        "wo": R(GR_H, 2, scale=0.4)}
gl_spec = {"wx": P(None, "mp"), "wh": P(None, "mp"), "b": P("mp"), "wo": P()}
gl_opt = GL_OPT.init(gl_p)
gl_ospec = state_specs(gl_opt, gl_p, gl_spec)
C.gspmd("g.gru_lion.dp4xmp2", {"dp": 4, "mp": 2}, (gl_spec, gl_ospec, P(None, "dp"), P("dp")),
        (gl_spec, gl_ospec, P()), gl_step, (gl_p, gl_opt, R(6, 16, 4), R(16, 2)))

# ---------------------------------------------------------------------------
# 17. GSPMD: a VAE step in bf16 compute (f32 parameters cast inside the loss,
#     f32 loss) with Adam, the batch over dp8.
VB_OPT = optax.adam(1e-3)


def vb_step(p, opt, x, eps):
    def loss(p):
        q = jax.tree.map(lambda w: w.astype(jnp.bfloat16), p)
        return va_loss(q, x.astype(jnp.bfloat16), eps.astype(jnp.bfloat16)).astype(jnp.float32)
    l, g = jax.value_and_grad(loss)(p)
    upd, opt = VB_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


vb_opt = VB_OPT.init(va_p)
C.gspmd("g.vae_bf16_adam.dp8", {"dp": 8}, (va_spec, state_specs(vb_opt, va_p, va_spec), P("dp"), P("dp")),
        (va_spec, state_specs(vb_opt, va_p, va_spec), P()), vb_step, (va_p, vb_opt, R(16, 12), R(16, 4)),
        note="bf16 compute: differences at bf16 rounding are expected")

# ---------------------------------------------------------------------------
# 18. GSPMD: a dense top-1 MoE step (every expert on every token, combined by
#     the routed gate), experts over ep and tokens over dp, with the expert
#     activations constrained to (dp, ep); SGD with momentum from optax.
DM_MESH = make_mesh({"dp": 2, "ep": 4})
DM_OPT = optax.sgd(0.1, momentum=0.9)


def dm_step(p, opt, x, y):
    def loss(p):
        gate = jax.nn.softmax(x @ p["wg"], -1)
        comb = jax.nn.one_hot(jnp.argmax(gate, -1), MO_E) * gate
        h = jax.nn.gelu(jnp.einsum("bd,edf->bef", x, p["w1"]))
        h = lax.with_sharding_constraint(h, NamedSharding(DM_MESH, P("dp", "ep")))
        out = jnp.einsum("be,bef,efd->bd", comb, h, p["w2"])
        return jnp.mean((x + out - y) ** 2)
    l, g = jax.value_and_grad(loss)(p)
    upd, opt = DM_OPT.update(g, opt, p)
    return optax.apply_updates(p, upd), opt, l


dm_p = {"wg": R(8, MO_E), "w1": R(MO_E, 8, 16, scale=0.4), "w2": R(MO_E, 16, 8, scale=0.4)}
dm_spec = {"wg": P(), "w1": P("ep"), "w2": P("ep")}
dm_opt = DM_OPT.init(dm_p)
dm_ospec = state_specs(dm_opt, dm_p, dm_spec)
C.gspmd("g.moe_top1_dense.dp2xep4", DM_MESH, (dm_spec, dm_ospec, P("dp"), P("dp")), (dm_spec, dm_ospec, P()),
        dm_step, (dm_p, dm_opt, R(16, 8), R(16, 8)))

# ---------------------------------------------------------------------------
C.finish()
