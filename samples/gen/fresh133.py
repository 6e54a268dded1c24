"""samples/fresh133: a 133rd batch of programs as a user writes them, on the theme of complete training steps on three-axis meshes of 8 CPU devices (2 x 2 x 2) combining parallelisms the way large-model codebases do (dp x fsdp x tp with FSDP all-gathers of parameters and reduce-scatters of gradients, dp x sp x tp with Megatron sequence-parallel LayerNorm regions, dp x ep x tp with expert-parallel all_to_all and tp inside the experts, pp x dp x tp with a 2-stage unrolled pipeline, ZeRO-style sharded optimizer state over an axis tuple) plus GSPMD steps under MaxText-style logical axis rules, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Every step is whole: forward of a tiny transformer block or MLP, a loss (cross
entropy on integer labels or MSE), jax.value_and_grad, an optax update
(adamw with a weight-decay mask, clip_by_global_norm, sgd with momentum) whose
state is sharded like the parameters (or, in 7., finer) and warmed by a few
single-device updates on random gradients. Inside shard_map the tp
collectives are Megatron's conjugate operators written with jax.custom_vjp
(copy: identity forward / psum backward; reduce: psum forward / identity
backward; sequence gather: all_gather forward / psum_scatter backward;
sequence scatter: psum_scatter forward / all_gather backward), the FSDP
all_gathers are either differentiated (their transpose is the gradient
reduce-scatter) or undone by an explicit psum_scatter.
shard_map families (bugs in brackets):
 1. MLP classifier, dp2 x fsdp2 x tp2: w1 / w2 all_gather'd over fsdp outside
    the loss, explicit psum_scatter of their gradients over fsdp and psum
    over dp, bias gradients psum'd over (dp, fsdp), clipping by the global
    norm (squares psum'd over the axes each leaf is sharded on), adamw with
    a mask. [b1's gradient psum'd over dp only (fsdp missing); optax's
    clip_by_global_norm on the local shards.]
 2. pre-LN transformer block + LM-style head, dp2 x fsdp2 x tp2: every
    matrix all_gather'd over fsdp inside the loss (autodiff reduce-scatters
    the gradients), heads and MLP over tp, gradients psum'd over dp, adamw.
    [wo gathered over dp instead of fsdp; the gradients psum'd over tp
    instead of dp.]
 3. Megatron sequence parallelism, dp2 x sp2 x tp2: the sequence over
    (sp, tp), LayerNorms on the local tokens, all_gather over tp along the
    sequence before the column-parallel matmuls and psum_scatter over tp
    along it after the row-parallel ones, causal attention with K/V
    all_gather'd over sp, MSE, sgd momentum. [LayerNorm gradients psum'd
    over (dp, sp) without tp; the reduce-scatter done on the flattened
    (batch x sequence) tokens, i.e. along the wrong dimension.]
 4. a tiny LM with vocabulary-parallel embedding, LM head and cross
    entropy (pmax / psum over tp of the logits' statistics, the target logit
    by a masked psum), tokens over (dp, sp), Megatron MLP, adamw with the
    embedding excluded from decay. [the sum of exponentials psum'd over sp
    instead of tp; the label not shifted by the vocabulary shard's start.]
 5. top-1 MoE with capacity (GShard groups = the (dp, ep) token shards),
    dp2 x ep2 x tp2: dispatch einsum, all_to_all over ep, experts with the
    hidden dim over tp, all_to_all back, combine, MSE, adamw; router
    gradients psum'd over (dp, ep), expert gradients over dp. [both
    all_to_alls over dp instead of ep; expert gradients psum'd over ep
    instead of dp.]
 6. 2-stage pipeline, pp2 x dp2 x tp2: two microbatches unrolled over three
    ticks with a ppermute 0 -> 1 hand-off, a Megatron MLP block per stage,
    cross entropy on stage 1 (masked), the head's gradient psum'd over pp,
    everything pmean'd over dp, sgd momentum. [the hand-off sent 1 -> 0;
    the stage gradients pmean'd over tp instead of dp.]
 7. ZeRO-2 on dp2 x fsdp2 x tp2: parameters replicated over (dp, fsdp), the
    gradients psum_scatter'd over the axis tuple (dp, fsdp) and divided by
    4, momentum state sharded over (dp, fsdp), the parameter shard updated
    and all_gather'd back. [the psum_scatter over (fsdp, dp) (chunks not
    those of the state); the division by the number of replicas missing.]
 8. top-2 MoE with a load-balancing auxiliary loss (GShard groups),
    dp2 x ep2 x tp2, experts over ep with tp inside, dispatch and combine by
    all_to_all, cross entropy of a classifier on the tokens plus the aux
    loss (its token-density statistic pmean'd over (dp, ep)),
    clip_by_global_norm + adamw. [the density taken from the local group
    only (pmean missing); the global norm without the expert leaves' psum
    over (ep, tp).]
GSPMD pairs (jax.jit with in/out NamedShardings on params, optimizer state
and batch; with_sharding_constraint through logical axis rules
batch -> (dp, fsdp), embed -> fsdp, mlp / heads -> tp; correct): 9. a
transformer block + head step with adamw (dp2 x fsdp2 x tp2); 10. an MLP
classifier with clip_by_global_norm + adamw (dp2 x fsdp2 x tp2); 11. the
top-1 MoE of 5. with experts over ep (dp2 x ep2 x tp2), sgd momentum; 12. the
sequence-parallel block of 3. with activations constrained over (sp, tp)
(dp2 x sp2 x tp2); 13. a 2-stage vmapped stage stack (pp2 x dp2 x tp2)
rolled with jnp.roll.
Numerics: correct pairs agree at f32 rounding level (about 1e-6 on outputs of
order 1); bug variants differ by 2e-3 (the adam moments and clipped
updates of 1. and 8.) to 6 (the pipeline's logits-driven updates).
Run from the repository root: bash samples/gen/run_fresh133.sh [SUBSTR...]
"""
import sys
from functools import partial
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
import optax
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh133.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh133.py"
C = Corpus("samples/fresh133", SCRIPT, "samples/gen/run_fresh133.sh", sys.argv[1:])
rng, R, I = seeded(133133)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
gelu = jax.nn.gelu
MESH_FT = {"dp": 2, "fsdp": 2, "tp": 2}
MESH_ST = {"dp": 2, "sp": 2, "tp": 2}
MESH_ET = {"dp": 2, "ep": 2, "tp": 2}
MESH_PT = {"pp": 2, "dp": 2, "tp": 2}


# ---------------------------------------------------------------------------
# Megatron's conjugate operators.
@partial(jax.custom_vjp, nondiff_argnums=(1,))
def copy_to(x, ax):
    return x


copy_to.defvjp(lambda x, ax: (x, None), lambda ax, _, g: (psum(g, ax),))


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def reduce_from(x, ax):
    return psum(x, ax)


reduce_from.defvjp(lambda x, ax: (psum(x, ax), None), lambda ax, _, g: (g,))


@partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def gather_seq(x, ax, dim):
    return lax.all_gather(x, ax, axis=dim, tiled=True)


gather_seq.defvjp(lambda x, ax, dim: (lax.all_gather(x, ax, axis=dim, tiled=True), None),
                  lambda ax, dim, _, g: (lax.psum_scatter(g, ax, scatter_dimension=dim, tiled=True),))


def _rs(x, ax, dim, flat):
    if flat:  # tokens flattened (batch-major) and scattered along the flat dim
        sh = x.shape
        y = lax.psum_scatter(x.reshape(-1, sh[-1]), ax, scatter_dimension=0, tiled=True)
        return y.reshape(sh[:dim] + (sh[dim] // 2,) + sh[dim + 1:])
    return lax.psum_scatter(x, ax, scatter_dimension=dim, tiled=True)


def _ag(g, ax, dim, flat):
    if flat:
        sh = g.shape
        y = lax.all_gather(g.reshape(-1, sh[-1]), ax, axis=0, tiled=True)
        return y.reshape(sh[:dim] + (sh[dim] * 2,) + sh[dim + 1:])
    return lax.all_gather(g, ax, axis=dim, tiled=True)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def scatter_seq(x, ax, dim, flat=False):
    return _rs(x, ax, dim, flat)


scatter_seq.defvjp(lambda x, ax, dim, flat: (_rs(x, ax, dim, flat), None),
                   lambda ax, dim, flat, _, g: (_ag(g, ax, dim, flat),))


def warm(opt, params, n=3, seed=0):
    """The optimizer state after n updates on random gradients (mid-training)."""
    r = np.random.default_rng(seed)
    st = opt.init(params)
    for _ in range(n):
        g = jax.tree.map(lambda a: (r.standard_normal(a.shape) * 0.1).astype(np.float32), params)
        _, st = opt.update(g, st, params)
    return np_tree(st)


def ce_sum(logits, labels):
    return -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(logits, -1), labels[..., None], -1))


def layer_norm(x, g, b, eps=1e-5):
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), -1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + eps) * g + b


def decay_mask(p):
    return {k: v.ndim >= 2 for k, v in p.items()}


def sq_norm(t):
    return jnp.sum(jnp.square(t))


# ---------------------------------------------------------------------------
# 1. MLP classifier, explicit FSDP gather / reduce-scatter, global-norm clip.
B1, D1, H1, C1 = 16, 16, 32, 8
CLIP1 = 0.2
ADAM1 = optax.adamw(3e-3, weight_decay=0.1, mask=decay_mask)
OPT1 = optax.chain(optax.clip_by_global_norm(CLIP1), ADAM1)
SPEC1 = {"w1": P("fsdp", "tp"), "b1": P("tp"), "w2": P("tp", "fsdp"), "b2": P()}
P1 = {"w1": R(D1, H1, scale=0.4), "b1": R(H1, scale=0.1), "w2": R(H1, C1, scale=0.4), "b2": R(C1, scale=0.1)}
S1 = warm(OPT1, P1, seed=1)


def mlp1(p, x):
    return gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def step1_ref(p, st, x, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(mlp1(p, x), lab) / B1)(p)
    upd, st = OPT1.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step1_sm(bug):
    def f(p, st, x, lab):
        full = {"w1": lax.all_gather(p["w1"], "fsdp", axis=0, tiled=True), "b1": p["b1"],
                "w2": lax.all_gather(p["w2"], "fsdp", axis=1, tiled=True), "b2": p["b2"]}

        def loss_fn(q):
            h = gelu(x @ q["w1"] + q["b1"])
            logits = reduce_from(h @ q["w2"], "tp") + q["b2"]
            return ce_sum(logits, lab) / B1
        loss, gf = jax.value_and_grad(loss_fn)(full)
        g = {"w1": psum(lax.psum_scatter(gf["w1"], "fsdp", scatter_dimension=0, tiled=True), "dp"),
             "w2": psum(lax.psum_scatter(gf["w2"], "fsdp", scatter_dimension=1, tiled=True), "dp"),
             "b1": psum(gf["b1"], "dp") if bug == "b1-grad-dp-only" else psum(gf["b1"], ("dp", "fsdp")),
             "b2": psum(gf["b2"], ("dp", "fsdp"))}
        if bug == "local-grad-norm":
            upd, st = OPT1.update(g, st, p)
        else:
            sq = psum(sq_norm(g["w1"]) + sq_norm(g["w2"]), ("fsdp", "tp")) + psum(sq_norm(g["b1"]), "tp") \
                + sq_norm(g["b2"])
            scale = jnp.minimum(1.0, CLIP1 / jnp.sqrt(sq))
            g = jax.tree.map(lambda t: t * scale, g)
            upd, adam = ADAM1.update(g, st[1], p)
            st = (st[0], adam)
        return optax.apply_updates(p, upd), st, psum(loss, ("dp", "fsdp"))
    return f


C.smap("s.fsdp_explicit_rs_mlp_ce_clip_adamw.dp2xfsdp2xtp2", MESH_FT, step1_sm,
       (SPEC1, state_specs(S1, SPEC1), P(("dp", "fsdp")), P(("dp", "fsdp"))),
       (SPEC1, state_specs(S1, SPEC1), P()), step1_ref, (P1, S1, R(B1, D1), I(0, C1, B1)),
       bugs=[("b1-grad-dp-only", ["missing-all-reduce"]), ("local-grad-norm", ["local-statistic"])])

# ---------------------------------------------------------------------------
# 2. transformer block + head, FSDP gathers differentiated, heads / MLP over tp.
B2, T2, D2, NH2, HD2, F2, V2 = 8, 8, 16, 4, 4, 32, 16
OPT2 = optax.adamw(2e-3, weight_decay=0.05, mask=decay_mask)
SPEC2 = {"ln": P(), "wq": P("fsdp", "tp"), "wk": P("fsdp", "tp"), "wv": P("fsdp", "tp"), "wo": P("tp", "fsdp"),
         "w1": P("fsdp", "tp"), "w2": P("tp", "fsdp"), "head": P("fsdp", None)}
P2 = {"ln": 1.0 + R(D2, scale=0.1), "wq": R(D2, NH2 * HD2, scale=0.3), "wk": R(D2, NH2 * HD2, scale=0.3),
      "wv": R(D2, NH2 * HD2, scale=0.3), "wo": R(NH2 * HD2, D2, scale=0.3), "w1": R(D2, F2, scale=0.3),
      "w2": R(F2, D2, scale=0.3), "head": R(D2, V2, scale=0.3)}
S2 = warm(OPT2, P2, seed=2)


def rms(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


def attn(q, k, v, qpos, kpos):
    b, tq, _ = q.shape
    q = q.reshape(b, tq, -1, HD2)
    k = k.reshape(b, k.shape[1], -1, HD2)
    v = v.reshape(b, v.shape[1], -1, HD2)
    s = jnp.einsum("bqhe,bkhe->bhqk", q, k) / np.sqrt(HD2)
    s = jnp.where(qpos[:, None] >= kpos[None, :], s, -1e9)
    o = jnp.einsum("bhqk,bkhe->bqhe", jax.nn.softmax(s, -1), v)
    return o.reshape(b, tq, -1)


def block2(p, x, tp=None):
    c = (lambda t: copy_to(t, tp)) if tp else (lambda t: t)
    r = (lambda t: reduce_from(t, tp)) if tp else (lambda t: t)
    pos = jnp.arange(x.shape[1])
    h = c(rms(x, p["ln"]))
    x = x + r(attn(h @ p["wq"], h @ p["wk"], h @ p["wv"], pos, pos) @ p["wo"])
    h = c(rms(x, p["ln"]))
    x = x + r(gelu(h @ p["w1"]) @ p["w2"])
    return x @ p["head"]


def step2_ref(p, st, x, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(block2(p, x), lab) / (B2 * T2))(p)
    upd, st = OPT2.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


GDIM2 = {"wq": 0, "wk": 0, "wv": 0, "wo": 1, "w1": 0, "w2": 1, "head": 0}


def step2_sm(bug):
    def f(p, st, x, lab):
        def loss_fn(p):
            full = {k: (lax.all_gather(v, "dp" if (bug == "gather-over-dp" and k == "wo") else "fsdp",
                                       axis=GDIM2[k], tiled=True) if k in GDIM2 else v) for k, v in p.items()}
            return ce_sum(block2(full, x, "tp"), lab) / (B2 * T2)
        loss, g = jax.value_and_grad(loss_fn)(p)
        g = {k: (psum(v, ("dp", "fsdp")) if k == "ln" else psum(v, "tp" if bug == "psum-tp-not-dp" else "dp"))
             for k, v in g.items()}
        upd, st = OPT2.update(g, st, p)
        return optax.apply_updates(p, upd), st, psum(loss, ("dp", "fsdp"))
    return f


C.smap("s.fsdp_autodiff_gather_block_ce_adamw.dp2xfsdp2xtp2", MESH_FT, step2_sm,
       (SPEC2, state_specs(S2, SPEC2), P(("dp", "fsdp")), P(("dp", "fsdp"))),
       (SPEC2, state_specs(S2, SPEC2), P()), step2_ref,
       (P2, S2, R(B2, T2, D2), I(0, V2, B2, T2)),
       bugs=[("gather-over-dp", ["wrong-axis"]), ("psum-tp-not-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. Megatron sequence parallelism on dp x sp x tp.
B3, T3, D3, NH3, F3 = 4, 16, 16, 4, 32
OPT3 = optax.sgd(0.05, momentum=0.9)
SPEC3 = {"g1": P(), "c1": P(), "g2": P(), "c2": P(), "wq": P(None, "tp"), "wk": P(None, "tp"),
         "wv": P(None, "tp"), "wo": P("tp", None), "w1": P(None, "tp"), "w2": P("tp", None)}
P3 = {"g1": 1.0 + R(D3, scale=0.1), "c1": R(D3, scale=0.1), "g2": 1.0 + R(D3, scale=0.1), "c2": R(D3, scale=0.1),
      "wq": R(D3, NH3 * HD2, scale=0.3), "wk": R(D3, NH3 * HD2, scale=0.3), "wv": R(D3, NH3 * HD2, scale=0.3),
      "wo": R(NH3 * HD2, D3, scale=0.3), "w1": R(D3, F3, scale=0.3), "w2": R(F3, D3, scale=0.3)}
S3 = warm(OPT3, P3, seed=3)
LN3 = ("g1", "c1", "g2", "c2")


def block3_ref(p, x):
    pos = jnp.arange(x.shape[1])
    h = layer_norm(x, p["g1"], p["c1"])
    x = x + attn(h @ p["wq"], h @ p["wk"], h @ p["wv"], pos, pos) @ p["wo"]
    h = layer_norm(x, p["g2"], p["c2"])
    return x + gelu(h @ p["w1"]) @ p["w2"]


def step3_ref(p, st, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.sum(jnp.square(block3_ref(p, x) - y)) / y.size)(p)
    upd, st = OPT3.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step3_sm(bug):
    flat = bug == "rs-flat-tokens"

    def f(p, st, x, y):
        def loss_fn(p, x):
            h = gather_seq(layer_norm(x, p["g1"], p["c1"]), "tp", 1)  # this sp rank's queries
            tq = h.shape[1]
            k = lax.all_gather(h @ p["wk"], "sp", axis=1, tiled=True)
            v = lax.all_gather(h @ p["wv"], "sp", axis=1, tiled=True)
            qpos = idx("sp") * tq + jnp.arange(tq)
            o = attn(h @ p["wq"], k, v, qpos, jnp.arange(k.shape[1])) @ p["wo"]
            x = x + scatter_seq(o, "tp", 1, flat)
            h = gather_seq(layer_norm(x, p["g2"], p["c2"]), "tp", 1)
            x = x + scatter_seq(gelu(h @ p["w1"]) @ p["w2"], "tp", 1, flat)
            return jnp.sum(jnp.square(x - y)) / (B3 * T3 * D3)
        loss, g = jax.value_and_grad(loss_fn)(p, x)
        ln_axes = ("dp", "sp") if bug == "ln-grad-no-tp" else ("dp", "sp", "tp")
        g = {k: psum(v, ln_axes if k in LN3 else ("dp", "sp")) for k, v in g.items()}
        upd, st = OPT3.update(g, st, p)
        return optax.apply_updates(p, upd), st, psum(loss, ("dp", "sp", "tp"))
    return f


X3 = P("dp", ("sp", "tp"), None)
C.smap("s.megatron_seqpar_ln_block_mse_sgdm.dp2xsp2xtp2", MESH_ST, step3_sm,
       (SPEC3, state_specs(S3, SPEC3), X3, X3), (SPEC3, state_specs(S3, SPEC3), P()), step3_ref,
       (P3, S3, R(B3, T3, D3), R(B3, T3, D3)),
       bugs=[("ln-grad-no-tp", ["missing-all-reduce"]), ("rs-flat-tokens", ["wrong-dimension"])])

# ---------------------------------------------------------------------------
# 4. tiny LM with vocabulary-parallel embedding, head and cross entropy.
B4, T4, V4, D4, F4 = 4, 8, 32, 16, 32
OPT4 = optax.adamw(3e-3, weight_decay=0.1, mask=lambda p: {k: k != "emb" for k in p})
SPEC4 = {"emb": P("tp", None), "w1": P(None, "tp"), "w2": P("tp", None), "head": P(None, "tp")}
P4 = {"emb": R(V4, D4, scale=0.5), "w1": R(D4, F4, scale=0.3), "w2": R(F4, D4, scale=0.3),
      "head": R(D4, V4, scale=0.3)}
S4 = warm(OPT4, P4, seed=4)


def lm4_ref(p, ids):
    h = p["emb"][ids]
    h = h + gelu(h @ p["w1"]) @ p["w2"]
    return h @ p["head"]


def step4_ref(p, st, ids, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(lm4_ref(p, ids), lab) / (B4 * T4))(p)
    upd, st = OPT4.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step4_sm(bug):
    def f(p, st, ids, lab):
        vl = V4 // 2
        start = idx("tp") * vl

        def loss_fn(p):
            loc = ids - start
            ok = (loc >= 0) & (loc < vl)
            e = jnp.where(ok[..., None], p["emb"][jnp.clip(loc, 0, vl - 1)], 0.0)
            h = reduce_from(e, "tp")
            h = h + reduce_from(gelu(copy_to(h, "tp") @ p["w1"]) @ p["w2"], "tp")
            logits = copy_to(h, "tp") @ p["head"]  # this shard's vocabulary
            m = pmax(lax.stop_gradient(jnp.max(logits, -1, keepdims=True)), "tp")
            se = jnp.sum(jnp.exp(logits - m), -1, keepdims=True)
            se = reduce_from(se, "sp" if bug == "lse-psum-over-sp" else "tp")
            tl = lab if bug == "label-no-offset" else lab - start
            tok = (tl >= 0) & (tl < vl)
            pick = jnp.take_along_axis(logits, jnp.clip(tl, 0, vl - 1)[..., None], -1)
            tgt = reduce_from(jnp.where(tok[..., None], pick, 0.0), "tp")
            return jnp.sum(jnp.log(se) + m - tgt) / (B4 * T4)
        loss, g = jax.value_and_grad(loss_fn)(p)
        g = jax.tree.map(lambda t: psum(t, ("dp", "sp")), g)
        upd, st = OPT4.update(g, st, p)
        return optax.apply_updates(p, upd), st, psum(loss, ("dp", "sp"))
    return f


C.smap("s.vocab_parallel_lm_ce_adamw.dp2xsp2xtp2", MESH_ST, step4_sm,
       (SPEC4, state_specs(S4, SPEC4), P("dp", "sp"), P("dp", "sp")), (SPEC4, state_specs(S4, SPEC4), P()),
       step4_ref, (P4, S4, I(0, V4, B4, T4), I(0, V4, B4, T4)),
       bugs=[("lse-psum-over-sp", ["wrong-axis"]), ("label-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 5. top-1 MoE with capacity, all_to_all over ep, tp inside the experts.
N5, D5, E5, H5, CAP5 = 32, 8, 4, 16, 3
G5, S5 = 4, 8
OPT5 = optax.adamw(3e-3, weight_decay=0.1, mask=lambda p: {k: k != "wr" for k in p})
SPEC5 = {"wr": P(), "w1": P("ep", None, "tp"), "w2": P("ep", "tp", None)}
P5 = {"wr": R(D5, E5, scale=0.8), "w1": R(E5, D5, H5, scale=0.4), "w2": R(E5, H5, D5, scale=0.4)}
S5_ = warm(OPT5, P5, seed=5)


def route1(xg, wr):
    probs = jax.nn.softmax(xg @ wr, -1)
    oh = jax.nn.one_hot(jnp.argmax(probs, -1), E5)
    pos = jnp.sum((jnp.cumsum(oh, 0) - 1.0) * oh, -1).astype(jnp.int32)
    disp = oh[:, :, None] * jax.nn.one_hot(pos, CAP5)[:, None, :]   # pos >= CAP5: dropped
    gate = jnp.sum(probs * oh, -1)
    return disp, disp * gate[:, None, None]


def moe5_ref(p, x):
    xg = x.reshape(G5, S5, D5)
    disp, comb = jax.vmap(route1, (0, None))(xg, p["wr"])
    xe = jnp.einsum("gsec,gsd->gecd", disp, xg)
    o = jnp.einsum("gech,ehd->gecd", gelu(jnp.einsum("gecd,edh->gech", xe, p["w1"])), p["w2"])
    return x + jnp.einsum("gsec,gecd->gsd", comb, o).reshape(N5, D5)


def step5_ref(p, st, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.sum(jnp.square(moe5_ref(p, x) - y)) / y.size)(p)
    upd, st = OPT5.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step5_sm(bug):
    ax = "dp" if bug == "a2a-over-dp" else "ep"

    def f(p, st, x, y):
        def loss_fn(p):
            disp, comb = route1(x, p["wr"])
            xe = jnp.einsum("sec,sd->ecd", disp, x)
            xe = lax.all_to_all(xe, ax, 0, 1, tiled=True)          # (E/ep, ep*C, D)
            h = gelu(jnp.einsum("ecd,edh->ech", copy_to(xe, "tp"), p["w1"]))
            o = reduce_from(jnp.einsum("ech,ehd->ecd", h, p["w2"]), "tp")
            o = lax.all_to_all(o, ax, 1, 0, tiled=True)            # (E, C, D)
            out = x + jnp.einsum("sec,ecd->sd", comb, o)
            return jnp.sum(jnp.square(out - y)) / (N5 * D5)
        loss, g = jax.value_and_grad(loss_fn)(p)
        g = {"wr": psum(g["wr"], ("dp", "ep")),
             "w1": psum(g["w1"], "ep" if bug == "expert-grad-psum-ep" else "dp"),
             "w2": psum(g["w2"], "ep" if bug == "expert-grad-psum-ep" else "dp")}
        upd, st = OPT5.update(g, st, p)
        return optax.apply_updates(p, upd), st, psum(loss, ("dp", "ep"))
    return f


C.smap("s.moe_top1_capacity_a2a_ep_tp_mse_adamw.dp2xep2xtp2", MESH_ET, step5_sm,
       (SPEC5, state_specs(S5_, SPEC5), P(("dp", "ep")), P(("dp", "ep"))), (SPEC5, state_specs(S5_, SPEC5), P()),
       step5_ref, (P5, S5_, R(N5, D5), R(N5, D5)),
       bugs=[("a2a-over-dp", ["wrong-axis"]), ("expert-grad-psum-ep", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 6. 2-stage pipeline (pp) of Megatron MLP blocks (tp), dp over the batch.
B6, D6, H6, V6, M6 = 8, 16, 32, 8, 2
OPT6 = optax.sgd(0.1, momentum=0.9)
SPEC6 = {"w1": P("pp", None, "tp"), "b1": P("pp", "tp"), "w2": P("pp", "tp", None), "wh": P()}
P6 = {"w1": R(2, D6, H6, scale=0.3), "b1": R(2, H6, scale=0.1), "w2": R(2, H6, D6, scale=0.3),
      "wh": R(D6, V6, scale=0.4)}
S6 = warm(OPT6, P6, seed=6)


def pipe6_ref(p, x):
    for s in range(2):
        x = x + gelu(x @ p["w1"][s] + p["b1"][s]) @ p["w2"][s]
    return x @ p["wh"]


def step6_ref(p, st, x, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(pipe6_ref(p, x), lab) / B6)(p)
    upd, st = OPT6.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step6_sm(bug):
    perm = [(1, 0)] if bug == "ppermute-backwards" else [(0, 1)]

    def f(p, st, x, lab):
        stage = idx("pp")
        b = x.shape[0]
        xm = x.reshape(M6, b // M6, D6)

        def loss_fn(p):
            w1, b1, w2 = p["w1"][0], p["b1"][0], p["w2"][0]
            recv = jnp.zeros_like(xm[0])
            outs = []
            for t in range(M6 + 1):
                inp = jnp.where(stage == 0, xm[min(t, M6 - 1)], recv)
                out = inp + reduce_from(gelu(copy_to(inp, "tp") @ w1 + b1) @ w2, "tp")
                if t >= 1:
                    outs.append(out)       # stage 1: microbatch t - 1
                if t < M6:
                    recv = lax.ppermute(out, "pp", perm)
            logits = jnp.concatenate(outs, 0) @ p["wh"]
            return jnp.where(stage == 1, ce_sum(logits, lab), 0.0) / b
        loss, g = jax.value_and_grad(loss_fn)(p)
        g = {k: pmean(psum(v, "pp"), "dp") if k == "wh" else pmean(v, "tp" if bug == "pmean-tp-not-dp" else "dp")
             for k, v in g.items()}
        upd, st = OPT6.update(g, st, p)
        return optax.apply_updates(p, upd), st, pmean(psum(loss, "pp"), "dp")
    return f


C.smap("s.pipeline2_unrolled_megatron_ce_sgdm.pp2xdp2xtp2", MESH_PT, step6_sm,
       (SPEC6, state_specs(S6, SPEC6), P("dp"), P("dp")), (SPEC6, state_specs(S6, SPEC6), P()), step6_ref,
       (P6, S6, R(B6, D6), I(0, V6, B6)),
       bugs=[("ppermute-backwards", ["wrong-permutation"]), ("pmean-tp-not-dp", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 7. ZeRO-2: gradients reduce-scattered over (dp, fsdp), sharded momentum.
B7, D7, H7 = 16, 16, 32
OPT7 = optax.sgd(0.05, momentum=0.9)
SPEC7 = {"w1": P(None, "tp"), "w2": P("tp", None)}
SSPEC7 = {"w1": P(("dp", "fsdp"), "tp"), "w2": P(("tp", "dp", "fsdp"), None)}
P7 = {"w1": R(D7, H7, scale=0.3), "w2": R(H7, D7, scale=0.3)}
S7 = warm(OPT7, P7, seed=7)


def step7_ref(p, st, x, y):
    def loss_fn(p):
        return jnp.mean(jnp.square(gelu(x @ p["w1"]) @ p["w2"] - y))
    loss, g = jax.value_and_grad(loss_fn)(p)
    upd, st = OPT7.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step7_sm(bug):
    rs_axes = ("fsdp", "dp") if bug == "rs-axis-order" else ("dp", "fsdp")

    def f(p, st, x, y):
        def loss_fn(p):
            out = reduce_from(gelu(copy_to(x, "tp") @ p["w1"]) @ p["w2"], "tp")
            return jnp.mean(jnp.square(out - y))       # mean over the local rows
        loss, g = jax.value_and_grad(loss_fn)(p)
        n = 4
        gs = {k: lax.psum_scatter(v, rs_axes, scatter_dimension=0, tiled=True) for k, v in g.items()}
        if bug != "no-mean-divide":
            gs = jax.tree.map(lambda t: t / n, gs)
        k = idx("dp") * 2 + idx("fsdp")
        ps = {kk: lax.dynamic_slice_in_dim(v, k * (v.shape[0] // n), v.shape[0] // n, 0) for kk, v in p.items()}
        upd, st = OPT7.update(gs, st, ps)
        ps = optax.apply_updates(ps, upd)
        newp = {kk: lax.all_gather(v, ("dp", "fsdp"), axis=0, tiled=True) for kk, v in ps.items()}
        return newp, st, pmean(loss, ("dp", "fsdp"))
    return f


C.smap("s.zero2_rs_axis_tuple_sharded_momentum.dp2xfsdp2xtp2", MESH_FT, step7_sm,
       (SPEC7, state_specs(S7, SSPEC7), P(("dp", "fsdp")), P(("dp", "fsdp"))),
       (SPEC7, state_specs(S7, SSPEC7), P()), step7_ref, (P7, S7, R(B7, D7), R(B7, D7)),
       bugs=[("rs-axis-order", ["wrong-axis-order"]), ("no-mean-divide", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. top-2 MoE classifier with a load-balancing loss, dp x ep x tp.
N8, D8, E8, H8, CAP8, K8 = 32, 8, 4, 16, 4, 4
G8, S8 = 4, 8
AUX8, CLIP8 = 0.1, 0.3
ADAM8 = optax.adamw(3e-3, weight_decay=0.05, mask=decay_mask)
OPT8 = optax.chain(optax.clip_by_global_norm(CLIP8), ADAM8)
SPEC8 = {"wr": P(), "w1": P("ep", None, "tp"), "w2": P("ep", "tp", None), "wc": P()}
P8 = {"wr": R(D8, E8, scale=0.8), "w1": R(E8, D8, H8, scale=0.4), "w2": R(E8, H8, D8, scale=0.4),
      "wc": R(D8, K8, scale=0.4)}
S8_ = warm(OPT8, P8, seed=8)


def route2(xg, wr):
    probs = jax.nn.softmax(xg @ wr, -1)
    i1 = jnp.argmax(probs, -1)
    oh1 = jax.nn.one_hot(i1, E8)
    oh2 = jax.nn.one_hot(jnp.argmax(jnp.where(oh1 > 0, -1.0, probs), -1), E8)
    pos1 = jnp.cumsum(oh1, 0) - 1.0
    pos2 = jnp.cumsum(oh2, 0) - 1.0 + jnp.sum(oh1, 0)
    disp = sum(oh[:, :, None] * jax.nn.one_hot(jnp.sum(pos * oh, -1).astype(jnp.int32), CAP8)[:, None, :]
               for oh, pos in ((oh1, pos1), (oh2, pos2)))
    g1, g2 = jnp.sum(probs * oh1, -1), jnp.sum(probs * oh2, -1)
    den = g1 + g2
    comb = (oh1 * (g1 / den)[:, None] + oh2 * (g2 / den)[:, None])[:, :, None] * disp
    return disp, comb, jnp.mean(oh1, 0), jnp.mean(probs, 0)


def moe8_ref(p, x):
    xg = x.reshape(G8, S8, D8)
    disp, comb, dens, pm = jax.vmap(route2, (0, None))(xg, p["wr"])
    xe = jnp.einsum("gsec,gsd->gecd", disp, xg)
    o = jnp.einsum("gech,ehd->gecd", gelu(jnp.einsum("gecd,edh->gech", xe, p["w1"])), p["w2"])
    h = x + jnp.einsum("gsec,gecd->gsd", comb, o).reshape(N8, D8)
    aux = E8 * jnp.sum(jnp.mean(dens, 0) * jnp.mean(pm, 0))
    return h @ p["wc"], aux


def step8_ref(p, st, x, lab):
    def loss_fn(p):
        logits, aux = moe8_ref(p, x)
        return ce_sum(logits, lab) / N8 + AUX8 * aux
    loss, g = jax.value_and_grad(loss_fn)(p)
    upd, st = OPT8.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


def step8_sm(bug):
    def f(p, st, x, lab):
        def loss_fn(p):
            disp, comb, dens, pm = route2(x, p["wr"])
            xe = lax.all_to_all(jnp.einsum("sec,sd->ecd", disp, x), "ep", 0, 1, tiled=True)
            h = gelu(jnp.einsum("ecd,edh->ech", copy_to(xe, "tp"), p["w1"]))
            o = reduce_from(jnp.einsum("ech,ehd->ecd", h, p["w2"]), "tp")
            o = lax.all_to_all(o, "ep", 1, 0, tiled=True)
            hid = x + jnp.einsum("sec,ecd->sd", comb, o)
            # the group-mean statistic: each group's share of the global aux loss
            dg = lax.stop_gradient(dens) if bug == "aux-local-density" else lax.stop_gradient(pmean(dens, ("dp", "ep")))
            aux = E8 * jnp.sum(dg * pm) / 4
            return ce_sum(hid @ p["wc"], lab) / N8 + AUX8 * aux
        loss, g = jax.value_and_grad(loss_fn)(p)
        g = {"wr": psum(g["wr"], ("dp", "ep")), "wc": psum(g["wc"], ("dp", "ep")),
             "w1": psum(g["w1"], "dp"), "w2": psum(g["w2"], "dp")}
        esq = sq_norm(g["w1"]) + sq_norm(g["w2"])
        sq = sq_norm(g["wr"]) + sq_norm(g["wc"]) + (esq if bug == "norm-experts-local" else psum(esq, ("ep", "tp")))
        scale = jnp.minimum(1.0, CLIP8 / jnp.sqrt(sq))
        g = jax.tree.map(lambda t: t * scale, g)
        upd, adam = ADAM8.update(g, st[1], p)
        return optax.apply_updates(p, upd), (st[0], adam), psum(loss, ("dp", "ep"))
    return f


C.smap("s.moe_top2_aux_loss_a2a_clip_adamw.dp2xep2xtp2", MESH_ET, step8_sm,
       (SPEC8, state_specs(S8_, SPEC8), P(("dp", "ep")), P(("dp", "ep"))), (SPEC8, state_specs(S8_, SPEC8), P()),
       step8_ref, (P8, S8_, R(N8, D8), I(0, K8, N8)),
       bugs=[("aux-local-density", ["local-statistic"]), ("norm-experts-local", ["local-statistic"])])

# ---------------------------------------------------------------------------
# GSPMD pairs: logical axis rules, constraints on activations.
RULES = {"batch": ("dp", "fsdp"), "embed": "fsdp", "mlp": "tp", "heads": "tp", "act_embed": None, "seq": None,
         "vocab": None, "norm": None, "kv": None}


def logical(*names, rules=RULES):
    return P(*[rules[n] for n in names])


def wsc(m, x, spec):
    return lax.with_sharding_constraint(x, NamedSharding(m, spec))


# 9. transformer block + head, adamw.
M9 = make_mesh(MESH_FT)
LSPEC9 = {"ln": ("norm",), "wq": ("embed", "heads"), "wk": ("embed", "heads"), "wv": ("embed", "heads"),
          "wo": ("heads", "embed"), "w1": ("embed", "mlp"), "w2": ("mlp", "embed"), "head": ("embed", "vocab")}
SPEC9 = {k: logical(*v) for k, v in LSPEC9.items()}
P9 = {k: np.array(v) for k, v in P2.items()}
S9 = warm(OPT2, P9, seed=9)


def block9(p, x):
    pos = jnp.arange(x.shape[1])
    act = logical("batch", "seq", "act_embed")
    x = wsc(M9, x, act)
    h = rms(x, p["ln"])
    q = wsc(M9, h @ p["wq"], logical("batch", "seq", "heads"))
    a = attn(q, h @ p["wk"], h @ p["wv"], pos, pos)
    x = wsc(M9, x + a @ p["wo"], act)
    h = rms(x, p["ln"])
    x = wsc(M9, x + wsc(M9, gelu(h @ p["w1"]), logical("batch", "seq", "mlp")) @ p["w2"], act)
    return x @ p["head"]


def step9(p, st, x, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(block9(p, x), lab) / (B2 * T2))(p)
    upd, st = OPT2.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


C.gspmd("g.maxtext_rules_block_ce_adamw.dp2xfsdp2xtp2", MESH_FT,
        (SPEC9, state_specs(S9, SPEC9), logical("batch", "seq", "act_embed"), logical("batch", "seq")),
        (SPEC9, state_specs(S9, SPEC9), P()), step9, (P9, S9, R(B2, T2, D2), I(0, V2, B2, T2)))

# 10. MLP classifier, clip_by_global_norm + adamw.
SPEC10 = {"w1": logical("embed", "mlp"), "b1": logical("mlp"), "w2": logical("mlp", "embed"), "b2": P()}
P10 = {"w1": R(D1, H1, scale=0.4), "b1": R(H1, scale=0.1), "w2": R(H1, C1 * 2, scale=0.4),
       "b2": R(C1 * 2, scale=0.1)}
S10 = warm(OPT1, P10, seed=10)


def step10(p, st, x, lab):
    def loss_fn(p):
        h = wsc(M9, gelu(x @ p["w1"] + p["b1"]), logical("batch", "mlp"))
        return ce_sum(h @ p["w2"] + p["b2"], lab) / x.shape[0]
    loss, g = jax.value_and_grad(loss_fn)(p)
    upd, st = OPT1.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss, optax.global_norm(g)


C.gspmd("g.mlp_ce_clip_global_norm_adamw.dp2xfsdp2xtp2", MESH_FT,
        (SPEC10, state_specs(S10, SPEC10), logical("batch", "act_embed"), logical("batch")),
        (SPEC10, state_specs(S10, SPEC10), P(), P()), step10, (P10, S10, R(32, D1), I(0, 2 * C1, 32)))

# 11. top-1 MoE, experts over ep, hidden over tp, sgd momentum.
M11 = make_mesh(MESH_ET)
OPT11 = optax.sgd(0.05, momentum=0.9)
SPEC11 = {"wr": P(), "w1": P("ep", None, "tp"), "w2": P("ep", "tp", None)}
P11 = {k: np.array(v) for k, v in P5.items()}
S11 = warm(OPT11, P11, seed=11)


def moe11(p, x):
    xg = wsc(M11, x.reshape(G5, S5, D5), P(("dp", "ep")))
    disp, comb = jax.vmap(route1, (0, None))(xg, p["wr"])
    xe = wsc(M11, jnp.einsum("gsec,gsd->gecd", disp, xg), P("dp", "ep"))
    h = wsc(M11, gelu(jnp.einsum("gecd,edh->gech", xe, p["w1"])), P("dp", "ep", None, "tp"))
    o = wsc(M11, jnp.einsum("gech,ehd->gecd", h, p["w2"]), P("dp", "ep"))
    return x + jnp.einsum("gsec,gecd->gsd", comb, o).reshape(N5, D5)


def step11(p, st, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.sum(jnp.square(moe11(p, x) - y)) / y.size)(p)
    upd, st = OPT11.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


C.gspmd("g.moe_top1_experts_ep_tp_sgdm.dp2xep2xtp2", MESH_ET,
        (SPEC11, state_specs(S11, SPEC11), P(("dp", "ep")), P(("dp", "ep"))), (SPEC11, state_specs(S11, SPEC11), P()),
        step11, (P11, S11, R(N5, D5), R(N5, D5)))

# 12. the sequence-parallel block, activations constrained over (sp, tp).
M12 = make_mesh(MESH_ST)
OPT12 = optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(0.05, momentum=0.9))
P12 = {k: np.array(v) for k, v in P3.items()}
S12 = warm(OPT12, P12, seed=12)


def block12(p, x):
    sp_act = P("dp", ("sp", "tp"), None)
    pos = jnp.arange(x.shape[1])
    x = wsc(M12, x, sp_act)
    h = wsc(M12, layer_norm(x, p["g1"], p["c1"]), sp_act)
    q = wsc(M12, h @ p["wq"], P("dp", "sp", "tp"))
    k = wsc(M12, h @ p["wk"], P("dp", None, "tp"))
    a = attn(q, k, h @ p["wv"], pos, pos)
    x = wsc(M12, x + a @ p["wo"], sp_act)
    h = wsc(M12, layer_norm(x, p["g2"], p["c2"]), sp_act)
    return wsc(M12, x + wsc(M12, gelu(h @ p["w1"]), P("dp", "sp", "tp")) @ p["w2"], sp_act)


def step12(p, st, x, y):
    loss, g = jax.value_and_grad(lambda p: jnp.sum(jnp.square(block12(p, x) - y)) / y.size)(p)
    upd, st = OPT12.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


C.gspmd("g.seqpar_block_constraints_clip_sgdm.dp2xsp2xtp2", MESH_ST,
        (SPEC3, state_specs(S12, SPEC3), X3, X3), (SPEC3, state_specs(S12, SPEC3), P()), step12,
        (P12, S12, R(B3, T3, D3), R(B3, T3, D3)))

# 13. 2 stages as a vmapped stack over pp, rolled with jnp.roll.
M13 = make_mesh(MESH_PT)
P13 = {k: np.array(v) for k, v in P6.items()}
S13 = warm(OPT6, P13, seed=13)


def pipe13(p, x):
    b = x.shape[0]
    xm = x.reshape(M6, b // M6, D6)
    state = jnp.zeros((2, b // M6, D6))
    stage_fn = jax.vmap(lambda w1, b1, w2, h: h + gelu(h @ w1 + b1) @ w2)
    outs = []
    for t in range(M6 + 1):
        state = state.at[0].set(xm[min(t, M6 - 1)])
        state = wsc(M13, state, P("pp", "dp"))
        out = stage_fn(p["w1"], p["b1"], p["w2"], state)
        if t >= 1:
            outs.append(out[1])
        state = jnp.roll(out, 1, axis=0)
    return jnp.concatenate(outs, 0) @ p["wh"]


def step13(p, st, x, lab):
    loss, g = jax.value_and_grad(lambda p: ce_sum(pipe13(p, x), lab) / B6)(p)
    upd, st = OPT6.update(g, st, p)
    return optax.apply_updates(p, upd), st, loss


C.gspmd("g.pipeline2_vmapped_roll_ce_sgdm.pp2xdp2xtp2", MESH_PT,
        (SPEC6, state_specs(S13, SPEC6), P("dp"), P("dp")), (SPEC6, state_specs(S13, SPEC6), P()), step13,
        (P13, S13, R(B6, D6), I(0, V6, B6)))

C.finish()
