"""samples/fresh: programs as a user writes them (optax optimizers, label-smoothed
and z-loss cross-entropy, norms over a sharded hidden dim, sliding-window GQA
attention, expert parallelism with all_to_all, remat + scan, bf16 compute with
f32 master weights, dropout, integer statistics, contrastive loss), each a
correct program and, for hand-written per-device code, the bug variants a
careless parallelisation introduces. Exported with the user-facing exporter
(scalify_jax.export_pair); every pair is also run by JAX on seeded inputs, and
its manifest entry records the largest difference from the single-device run
("numerics"), so a bug variant is visibly wrong and a correct pair agrees.
Run from the repository root: bash samples/gen/run_fresh.sh [SUBSTR...]
(only the pairs whose name contains a SUBSTR; the others keep their entries).
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
import optax
from jax import lax
from jax.sharding import PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh.sh)
from fresh_lib import Corpus, seeded  # noqa: E402

C = Corpus("samples/fresh", "samples/gen/fresh.py", "samples/gen/run_fresh.sh", sys.argv[1:])
gspmd, smap = C.gspmd, C.smap
rng, R, I = seeded(2026)


psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index


def specs_like(tree, param_specs):
    """Specs for an optimizer state: a leaf under a key naming a parameter gets
    that parameter's spec when it has the parameter's shape, everything else
    (counts, factored moments) is replicated."""
    def one(path, leaf):
        for k in reversed(path):
            key = getattr(k, "key", None)
            if key in param_specs and np.shape(leaf) == param_specs[key][1]:
                return param_specs[key][0]
        return P()
    return jax.tree_util.tree_map_with_path(one, tree)


# ---------------------------------------------------------------------------
# 1. optax: clip_by_global_norm + adamw with a weight-decay mask (no decay on
#    biases and norms), GSPMD, a 2-D mesh. The global norm sums over shards.
def mlp_loss(p, x, y):
    h = x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * p["norm"]
    h = jax.nn.gelu(h @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def mlp_params(d=16, f=32):
    return {"norm": 1.0 + R(d, scale=0.1), "w1": R(d, f, scale=0.3), "b1": R(f, scale=0.1),
            "w2": R(f, d, scale=0.3), "b2": R(d, scale=0.1)}


def optax_step(tx):
    def step(params, state, x, y):
        loss, g = jax.value_and_grad(mlp_loss)(params, x, y)
        upd, state = tx.update(g, state, params)
        return optax.apply_updates(params, upd), state, loss
    return step


def optax_case(name, mesh, tx, pspec, xspec, warm=2):
    params = mlp_params()
    x, y = R(8, 16), R(8, 16)
    state = tx.init(params)
    for _ in range(warm):  # a few steps so that the moments are not zero
        _, g = jax.value_and_grad(mlp_loss)(params, x * 0.5, y)
        _, state = tx.update(g, state, params)
    sspec = specs_like(state, {k: (pspec[k], params[k].shape) for k in params})
    gspmd(name, mesh, (pspec, sspec, xspec, xspec), (pspec, sspec, P()), optax_step(tx), (params, state, x, y))


decay_mask = lambda p: {k: k.startswith("w") for k in p}
tp_specs = {"norm": P(), "w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "b2": P()}
optax_case("g.optax_adamw_mask_clip.dp2xtp4", {"dp": 2, "tp": 4},
           optax.chain(optax.clip_by_global_norm(0.5), optax.adamw(1e-2, weight_decay=0.1, mask=decay_mask)),
           tp_specs, P("dp", None))
fsdp_specs = {"norm": P(), "w1": P("fsdp", None), "b1": P("fsdp"), "w2": P("fsdp", None), "b2": P()}
optax_case("g.optax_lion.fsdp4", {"fsdp": 4}, optax.lion(1e-3, weight_decay=0.01), fsdp_specs, P("fsdp", None))
optax_case("g.optax_adafactor.tp4", {"tp": 4},
           optax.adafactor(1e-2, min_dim_size_to_factor=8, decay_rate=0.8), tp_specs, P())

# ---------------------------------------------------------------------------
# 2. clip_by_global_norm written by hand over tensor-parallel parameters:
#    sharded parameters' squares need a psum over tp, replicated ones must not get one.
def clip_update(w1, w2, b, g1, g2, gb):
    n = jnp.sqrt(jnp.sum(g1 ** 2) + jnp.sum(g2 ** 2) + jnp.sum(gb ** 2))
    s = jnp.minimum(1.0, 1.0 / (n + 1e-6))
    return w1 - 0.1 * s * g1, w2 - 0.1 * s * g2, b - 0.1 * s * gb


def clip_tp(bug):
    def f(w1, w2, b, g1, g2, gb):
        sharded = jnp.sum(g1 ** 2) + jnp.sum(g2 ** 2)
        if bug == "norm-psum-replicated":
            sq = psum(sharded + jnp.sum(gb ** 2), "tp")
        elif bug == "norm-no-psum":
            sq = sharded + jnp.sum(gb ** 2)
        else:
            sq = psum(sharded, "tp") + jnp.sum(gb ** 2)
        s = jnp.minimum(1.0, 1.0 / (jnp.sqrt(sq) + 1e-6))
        return w1 - 0.1 * s * g1, w2 - 0.1 * s * g2, b - 0.1 * s * gb
    return f


tp_in = (P(None, "tp"), P("tp", None), P(), P(None, "tp"), P("tp", None), P())
smap("s.clip_global_norm.tp4", {"tp": 4}, clip_tp, tp_in, (P(None, "tp"), P("tp", None), P()), clip_update,
     (R(16, 32), R(32, 16), R(16), R(16, 32), R(32, 16), R(16)),
     bugs=[("norm-no-psum", ["missing-all-reduce"]), ("norm-psum-replicated", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 3. label-smoothed cross-entropy over vocab-parallel logits (Megatron style)
EPS = 0.1


def xent_ls(logits, labels):
    lse = jax.nn.logsumexp(logits, -1)
    lab = jnp.take_along_axis(logits, labels[:, None], -1)[:, 0]
    return jnp.mean((1 - EPS) * (lse - lab) + EPS * (lse - jnp.mean(logits, -1)))


def xent_ls_tp(bug):
    def f(logits, labels):
        vl = logits.shape[-1]
        v = vl * psum(1, "tp")
        m = jnp.max(logits, -1)
        if bug != "local-max":
            m = pmax(m, "tp")
        lse = m + jnp.log(psum(jnp.sum(jnp.exp(logits - m[:, None]), -1), "tp"))
        loc = labels - idx("tp") * vl
        mine = (loc >= 0) & (loc < vl)
        lab = jnp.take_along_axis(logits, jnp.clip(loc, 0, vl - 1)[:, None], -1)[:, 0]
        lab = psum(jnp.where(mine, lab, 0.0), "tp")
        total = psum(jnp.sum(logits, -1), "tp")
        mean = total / (vl if bug == "smooth-local-vocab" else v)
        return jnp.mean((1 - EPS) * (lse - lab) + EPS * (lse - mean))
    return f


smap("s.xent_label_smooth.tp4", {"tp": 4}, xent_ls_tp, (P(None, "tp"), P()), P(), xent_ls,
     (R(8, 64, scale=2.0), I(0, 64, 8)),
     bugs=[("local-max", ["missing-all-reduce"]), ("smooth-local-vocab", ["constant-mismatch"])])

# ---------------------------------------------------------------------------
# 4. masked token loss with z-loss, data parallel: sum(mask*loss)/sum(mask)
#    needs both sums over the batch, not the mean of the per-shard ratios.
def zloss_tok(logits, labels):
    lse = jax.nn.logsumexp(logits, -1)
    lab = jnp.take_along_axis(logits, labels[..., None], -1)[..., 0]
    return lse - lab + 1e-4 * lse ** 2


def masked_loss(logits, labels, mask):
    return jnp.sum(mask * zloss_tok(logits, labels)) / jnp.sum(mask)


def masked_loss_dp(bug):
    def f(logits, labels, mask):
        num = jnp.sum(mask * zloss_tok(logits, labels))
        if bug == "pmean-of-ratios":
            return pmean(num / jnp.sum(mask), "dp")
        return psum(num, "dp") / psum(jnp.sum(mask), "dp")
    return f


tok_mask = (rng.random((8, 6)) < np.linspace(0.2, 0.95, 8)[:, None]).astype(np.float32)
tok_mask[:, 0] = 1.0
smap("s.masked_zloss.dp4", {"dp": 4}, masked_loss_dp, (P("dp"), P("dp"), P("dp")), P(), masked_loss,
     (R(8, 6, 16), I(0, 16, 8, 6), tok_mask), bugs=[("pmean-of-ratios", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 5. LayerNorm over a tensor-parallel hidden dim: mean and variance need psums.
def layernorm(x, g, b):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * g + b


def layernorm_tp(bug):
    def f(x, g, b):
        h = x.shape[-1] * psum(1, "tp")
        if bug == "local-mean":
            mu = jnp.mean(x, -1, keepdims=True)
        else:
            mu = psum(jnp.sum(x, -1, keepdims=True), "tp") / h
        var = psum(jnp.sum((x - mu) ** 2, -1, keepdims=True), "tp") / h
        return (x - mu) * lax.rsqrt(var + 1e-5) * g + b
    return f


smap("s.layernorm_hidden.tp4", {"tp": 4}, layernorm_tp, (P(None, "tp"), P("tp"), P("tp")), P(None, "tp"), layernorm,
     (R(8, 32) + 0.5, 1.0 + R(32, scale=0.1), R(32, scale=0.1)), bugs=[("local-mean", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 6. sliding-window GQA attention, heads tensor-parallel, output row-parallel
HD, WIN = 4, 3


def swa_attn(x, wq, wk, wv, wo):
    b, t, _ = x.shape
    q = (x @ wq).reshape(b, t, -1, HD)
    k = (x @ wk).reshape(b, t, -1, HD)
    v = (x @ wv).reshape(b, t, -1, HD)
    rep = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(HD)
    i, j = jnp.arange(t)[:, None], jnp.arange(t)[None, :]
    s = jnp.where((j <= i) & (i - j < WIN), s, -1e9)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, -1), v).reshape(b, t, -1)
    return o @ wo


def rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def swa_block(x, g, wq, wk, wv, wo):
    return x + swa_attn(rms(x, g), wq, wk, wv, wo)


def swa_tp(bug):
    def f(x, g, wq, wk, wv, wo):
        o = swa_attn(rms(x, g), wq, wk, wv, wo)
        return x + (o if bug == "no-psum" else psum(o, "tp"))
    return f


swa_args = (R(4, 8, 32), 1.0 + R(32, scale=0.1), R(32, 32, scale=0.3), R(32, 16, scale=0.3), R(32, 16, scale=0.3),
            R(32, 32, scale=0.3))
smap("s.swa_gqa.dp2xtp4", {"dp": 2, "tp": 4}, swa_tp,
     (P("dp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None)), P("dp"), swa_block, swa_args,
     bugs=[("no-psum", ["missing-all-reduce"])])
gspmd("g.swa_gqa.dp2xtp4", {"dp": 2, "tp": 4},
      (P("dp"), P(), P(None, "tp"), P(None, "tp"), P(None, "tp"), P("tp", None)), P("dp"), swa_block, swa_args)

# ---------------------------------------------------------------------------
# 7. top-2 MoE (argmax twice, renormalised gates), experts sharded; the
#    per-device program dispatches with all_to_all and combines with another.
NE, NDEV = 8, 4


def top2_gates(x, wr):
    p = jax.nn.softmax(x @ wr, -1)
    first = jax.nn.one_hot(jnp.argmax(p, -1), NE)
    second = jax.nn.one_hot(jnp.argmax(jnp.where(first > 0, -1.0, p), -1), NE)
    g = p * (first + second)
    return g / jnp.sum(g, -1, keepdims=True)


def moe(x, wr, w1, w2):
    g = top2_gates(x, wr)
    y = jnp.einsum("etf,efd->etd", jax.nn.gelu(jnp.einsum("td,edf->etf", x, w1)), w2)
    return jnp.einsum("te,etd->td", g, y)


def moe_ep(bug):
    def f(x, wr, w1, w2):
        tl, el = x.shape[0], w1.shape[0]
        g = top2_gates(x, wr)
        if bug == "gate-layout":
            gd = g.reshape(NDEV, tl, el)
        else:
            gd = g.reshape(tl, NDEV, el).transpose(1, 0, 2)
        xs = lax.all_to_all(jnp.broadcast_to(x, (NDEV,) + x.shape), "ep", 0, 0)
        gs = lax.all_to_all(gd, "ep", 0, 0)
        h = jax.nn.gelu(jnp.einsum("std,edf->setf", xs, w1))
        y = jnp.einsum("ste,setd->std", gs, jnp.einsum("setf,efd->setd", h, w2))
        return jnp.sum(lax.all_to_all(y, "ep", 0, 0), 0)
    return f


moe_args = (R(16, 8), R(8, NE), R(NE, 8, 16, scale=0.3), R(NE, 16, 8, scale=0.3))
smap("s.moe_top2_a2a.ep4", {"ep": NDEV}, moe_ep, (P("ep"), P(), P("ep"), P("ep")), P("ep"), moe, moe_args,
     bugs=[("gate-layout", ["wrong-shard-dim"])])
gspmd("g.moe_top2.ep4", {"ep": NDEV}, (P(), P(), P("ep"), P("ep")), P(), moe, moe_args)

# ---------------------------------------------------------------------------
# 8. vocab-parallel embedding lookup: out-of-range rows must be zeroed before the psum
def embed(table, ids):
    return jnp.take(table, ids, axis=0)


def embed_tp(bug):
    def f(table, ids):
        vl = table.shape[0]
        loc = ids - idx("tp") * vl
        rows = jnp.take(table, jnp.clip(loc, 0, vl - 1), axis=0)
        if bug != "no-mask":
            rows = jnp.where(((loc >= 0) & (loc < vl))[..., None], rows, 0.0)
        return psum(rows, "tp")
    return f


smap("s.vocab_embed.tp4", {"tp": 4}, embed_tp, (P("tp", None), P()), P(), embed, (R(64, 16), I(0, 64, 4, 8)),
     bugs=[("no-mask", ["wrong-reduction"])])

# ---------------------------------------------------------------------------
# 9. CLIP-style contrastive loss, data parallel: each device scores its rows
#    against the gathered batch; its labels are offset by its position.
def clip_loss(a, b):
    a = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
    b = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
    lg = 10.0 * a @ b.T
    lab = jnp.arange(a.shape[0])
    ce = lambda z: jnp.mean(jax.nn.logsumexp(z, -1) - z[lab, lab])
    return 0.5 * (ce(lg) + ce(lg.T))


def clip_dp(bug):
    def f(a, b):
        a = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
        b = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
        ga, gb = lax.all_gather(a, "dp", tiled=True), lax.all_gather(b, "dp", tiled=True)
        n = a.shape[0]
        lab = jnp.arange(n) + (0 if bug == "label-no-offset" else idx("dp") * n)
        ce = lambda z: jnp.mean(jax.nn.logsumexp(z, -1) - z[jnp.arange(n), lab])
        return pmean(0.5 * (ce(10.0 * a @ gb.T) + ce(10.0 * b @ ga.T)), "dp")
    return f


clip_args = (R(16, 8), R(16, 8))
smap("s.clip_contrastive.dp4", {"dp": 4}, clip_dp, (P("dp"), P("dp")), P(), clip_loss, clip_args,
     bugs=[("label-no-offset", ["wrong-shard-dim"])])
gspmd("g.clip_contrastive.dp8", {"dp": 8}, (P("dp"), P("dp")), P(), clip_loss, clip_args)

# ---------------------------------------------------------------------------
# 10. synchronised batch norm (NHWC), data parallel, with running statistics
def batchnorm(x, g, b, rm, rv):
    mu = jnp.mean(x, (0, 1, 2))
    var = jnp.var(x, (0, 1, 2))
    y = (x - mu) * lax.rsqrt(var + 1e-5) * g + b
    return y, 0.9 * rm + 0.1 * mu, 0.9 * rv + 0.1 * var


def batchnorm_dp(bug):
    def f(x, g, b, rm, rv):
        mu = jnp.mean(x, (0, 1, 2))
        sq = jnp.mean(x * x, (0, 1, 2))
        if bug != "local-stats":
            mu, sq = pmean(mu, "dp"), pmean(sq, "dp")
        var = sq - mu * mu
        y = (x - mu) * lax.rsqrt(var + 1e-5) * g + b
        return y, 0.9 * rm + 0.1 * mu, 0.9 * rv + 0.1 * var
    return f


bn_args = (R(16, 4, 4, 8) + 0.3, 1.0 + R(8, scale=0.1), R(8, scale=0.1), R(8, scale=0.1), 1.0 + R(8, scale=0.1) ** 2)
smap("s.sync_batchnorm.dp8", {"dp": 8}, batchnorm_dp, (P("dp"), P(), P(), P(), P()), (P("dp"), P(), P()), batchnorm,
     bn_args, bugs=[("local-stats", ["missing-all-reduce"])])
gspmd("g.batchnorm.dp8", {"dp": 8}, (P("dp"), P(), P(), P(), P()), (P("dp"), P(), P()), batchnorm, bn_args)

# ---------------------------------------------------------------------------
# 11. integer statistics: argmax accuracy over masked tokens, prediction histogram
def token_stats(logits, labels, mask):
    pred = jnp.argmax(logits, -1)
    correct = jnp.sum(((pred == labels) & (mask > 0)).astype(jnp.int32))
    total = jnp.sum(mask)
    hist = jnp.sum(jax.nn.one_hot(pred, logits.shape[-1], dtype=jnp.int32) * mask[:, None], 0)
    return correct, total, correct / total, hist


def token_stats_dp(bug):
    def f(logits, labels, mask):
        pred = jnp.argmax(logits, -1)
        correct = psum(jnp.sum(((pred == labels) & (mask > 0)).astype(jnp.int32)), "dp")
        total = psum(jnp.sum(mask), "dp")
        acc = correct / (jnp.sum(mask) if bug == "local-total" else total)
        hist = psum(jnp.sum(jax.nn.one_hot(pred, logits.shape[-1], dtype=jnp.int32) * mask[:, None], 0), "dp")
        return correct, total, acc, hist
    return f


stat_logits = R(32, 16)
stat_args = (stat_logits, np.where(rng.random(32) < 0.6, stat_logits.argmax(-1), I(0, 16, 32)).astype(np.int32),
             I(0, 2, 32))
smap("s.token_stats.dp8", {"dp": 8}, token_stats_dp, (P("dp"), P("dp"), P("dp")), P(), token_stats, stat_args,
     bugs=[("local-total", ["missing-all-reduce"])])
gspmd("g.token_stats.dp8", {"dp": 8}, (P("dp"), P("dp"), P("dp")), P(), token_stats, stat_args)

# ---------------------------------------------------------------------------
# 12. scan over layers with jax.checkpoint, tensor-parallel MLP blocks, the
#     gradients of the loss (check_vma: JAX inserts the backward psums).
def scan_mlp(x, g, w1, w2, part=lambda h: h):
    @jax.checkpoint
    def layer(h, p):
        gi, a, b = p
        return h + part(jax.nn.gelu(rms(h, gi) @ a) @ b), None
    return lax.scan(layer, x, (g, w1, w2))[0]


def scan_loss(x, g, w1, w2):
    return jnp.mean(scan_mlp(x, g, w1, w2) ** 2)


def scan_grad(x, g, w1, w2):
    return jax.value_and_grad(scan_loss, argnums=(2, 3))(x, g, w1, w2)


def scan_tp(bug):
    def f(x, g, w1, w2):
        if bug == "psum-after-scan":
            # the carry must be varying for the scan (as JAX's error message suggests)
            xv = lax.pcast(x, ("tp",), to="varying")
            loss = lambda a, b: jnp.mean(psum(scan_mlp(xv, g, a, b), "tp") ** 2)
        else:
            loss = lambda a, b: jnp.mean(scan_mlp(x, g, a, b, lambda h: psum(h, "tp")) ** 2)
        return jax.value_and_grad(loss, argnums=(0, 1))(w1, w2)
    return f


scan_args = (R(8, 16), 1.0 + R(3, 16, scale=0.1), R(3, 16, 32, scale=0.3), R(3, 32, 16, scale=0.3))
smap("s.remat_scan_tp.tp4", {"tp": 4}, scan_tp, (P(), P(), P(None, None, "tp"), P(None, "tp", None)),
     (P(), (P(None, None, "tp"), P(None, "tp", None))), scan_grad, scan_args,
     bugs=[("psum-after-scan", ["missing-all-reduce"])], check_vma=True)

# ---------------------------------------------------------------------------
# 13. bf16 compute from f32 master weights: scan + remat over stacked layers,
#     loss in f32, SGD on the f32 masters; GSPMD on a 2-D mesh.
def bf16_step(master, x, y):
    def loss(m):
        c = jax.tree.map(lambda a: a.astype(jnp.bfloat16), m)
        h = scan_mlp(x.astype(jnp.bfloat16), c["g"], c["w1"], c["w2"])
        return jnp.mean((h.astype(jnp.float32) - y) ** 2)
    l, gr = jax.value_and_grad(loss)(master)
    return jax.tree.map(lambda a, b: a - 0.05 * b, master, gr), l


bf16_specs = {"g": P(), "w1": P(None, None, "tp"), "w2": P(None, "tp", None)}
gspmd("g.bf16_master_scan_remat.dp2xtp4", {"dp": 2, "tp": 4}, (bf16_specs, P("dp"), P("dp")), (bf16_specs, P()),
      bf16_step, ({"g": 1.0 + R(3, 16, scale=0.1), "w1": R(3, 16, 32, scale=0.3), "w2": R(3, 32, 16, scale=0.3)},
                  R(8, 16), R(8, 16)))

# ---------------------------------------------------------------------------
# 14. dropout under jit (threefry, partitionable), GSPMD MLP on a 2-D mesh
def dropout_mlp(key, x, w1, w2):
    h = jax.nn.relu(x @ w1)
    keep = jax.random.bernoulli(jax.random.fold_in(key, 7), 0.9, h.shape)
    return jnp.where(keep, h / 0.9, 0.0) @ w2


gspmd("g.dropout_mlp.dp2xtp4", {"dp": 2, "tp": 4}, (P(), P("dp"), P(None, "tp"), P("tp", None)), P("dp"), dropout_mlp,
      (np.array(jax.random.key_data(jax.random.PRNGKey(3))), R(8, 16), R(16, 32, scale=0.3), R(32, 16, scale=0.3)),
      note="jax_threefry_partitionable: %s" % jax.config.jax_threefry_partitionable)

# ---------------------------------------------------------------------------
# 15. label smoothing + z-loss + masked mean with its gradient, GSPMD,
#     vocab-sharded projection, batch on dp
def lm_head_loss(w, h, labels, mask):
    lg = h @ w
    lse = jax.nn.logsumexp(lg, -1)
    lab = jnp.take_along_axis(lg, labels[:, None], -1)[:, 0]
    tok = (1 - EPS) * (lse - lab) + EPS * (lse - jnp.mean(lg, -1)) + 1e-4 * lse ** 2
    return jnp.sum(tok * mask) / jnp.maximum(jnp.sum(mask), 1.0)


gspmd("g.xent_ls_zloss_grad.dp2xtp4", {"dp": 2, "tp": 4}, (P(None, "tp"), P("dp"), P("dp"), P("dp")), (P(), P(None, "tp")),
      jax.value_and_grad(lm_head_loss), (R(16, 64, scale=0.3), R(8, 16), I(0, 64, 8), (rng.random(8) < 0.7).astype(np.float32)))

# ---------------------------------------------------------------------------
# 16. memory-efficient cross-entropy: scan over vocab chunks with an online
#     logsumexp; batch on dp, projection replicated
def chunked_ce(h, w, labels):
    wc = w.reshape(w.shape[0], 4, -1).transpose(1, 0, 2)

    def body(c, xs):
        m, s, lab = c
        i, wi = xs
        lg = h @ wi
        m2 = jnp.maximum(m, jnp.max(lg, -1))
        s = s * jnp.exp(m - m2) + jnp.sum(jnp.exp(lg - m2[:, None]), -1)
        loc = labels - i * wi.shape[1]
        hit = (loc >= 0) & (loc < wi.shape[1])
        lab = lab + jnp.where(hit, jnp.take_along_axis(lg, jnp.clip(loc, 0, wi.shape[1] - 1)[:, None], -1)[:, 0], 0.0)
        return (m2, s, lab), None
    n = h.shape[0]
    (m, s, lab), _ = lax.scan(body, (jnp.full((n,), -jnp.inf), jnp.zeros((n,)), jnp.zeros((n,))), (jnp.arange(4), wc))
    return m + jnp.log(s) - lab


gspmd("g.chunked_ce_scan.dp4", {"dp": 4}, (P("dp"), P(), P("dp")), P("dp"), chunked_ce,
      (R(8, 16), R(16, 64, scale=0.3), I(0, 64, 8)))

# ---------------------------------------------------------------------------
# 17. three-operand einsum (bilinear layer), contraction dims sharded, 2-D mesh
gspmd("g.bilinear_einsum.dp2xtp4", {"dp": 2, "tp": 4}, (P("dp", None), P(None, None, "tp"), P("dp", "tp"), P()),
      P("dp", None), lambda a, w, b, bias: jnp.einsum("bi,oij,bj->bo", a, w, b) + bias,
      (R(8, 16), R(8, 16, 16, scale=0.2), R(8, 16), R(8)))

# ---------------------------------------------------------------------------
C.finish()
