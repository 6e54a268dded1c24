"""samples/fresh128: a 128th batch of programs as a user writes them, on the theme of complete training steps written by following the official tutorials and guides users copy from (JAX "Distributed arrays and automatic parallelization", JAX "Manual parallelism with shard_map", Flax "Scale up on multiple devices" / NNX logical-axis sharding written by hand since flax is not in the venv), each a whole step: forward, loss, jax.value_and_grad, an optax update (AdamW, SGD with momentum / Nesterov, optax.MultiSteps accumulation, clip_by_global_norm chains) on 8 CPU devices, none of them an idiom of samples/fresh .. fresh26, probe, train or wild.
Optimizer states are warmed by a few single-device updates on random
gradients before export (a mid-training step: Adam's first step would be
sign descent, which hides most gradient-scale bugs).
shard_map families:
 1. the shard_map tutorial's data parallelism (dp8): an MLP classifier,
    softmax cross entropy on optax.smooth_labels targets, grads pmean'd,
    optax.sgd with momentum. Bugs: grads psum'd instead of pmean'd, the
    reported loss left local (not pmean'd).
 2. the tutorial's FSDP (dp2 x fsdp4): weights sharded on dim 0 over fsdp,
    all_gather(tiled) before use, a masked token cross entropy normalised by
    the global token count (uneven per device, one device has none), grads
    psum_scatter'd over fsdp then psum'd over dp, optax.adamw on the shards.
    Bugs: the local token count, the second reduction over fsdp instead of
    dp (wrong axis of the 2-D mesh).
 3. a Megatron MLP with the f / g custom_vjp operators (dp2 x tp4), two
    residual blocks, optax.chain(global-norm clip, adamw) where the clip
    psums the squared norms of the tp-sharded leaves (a hand-written
    GradientTransformation). Bugs: optax.clip_by_global_norm used on the
    local shards (the global-norm psum dropped), f's backward without the
    psum of the input cotangent.
 4. the tutorial's collective matmul (tp8): tanh(x @ w0) rows all-gathered
    by a fori_loop of ppermutes, each step's block matmul'd with the local
    column shard of w1 and written at its offset; grads by value_and_grad of
    the local loss part (through the ppermutes), w0's grad psum'd, optax.sgd
    with momentum. Bugs: the ppermute direction reversed, w0's grad not
    psum'd.
 5. scan over stacked layers under jax.checkpoint (dots_with_no_batch_dims
    _saveable) with ZeRO-3 weights sharded over ('dp', 'fsdp') jointly and
    all_gather'd inside the scanned body (grads by the transpose of the
    gather), an RMSNorm scale sharded too, optax.adamw. Bugs: the gather
    over ('fsdp', 'dp') (shards concatenated in the wrong order), the
    8-wide norm scale not gathered (its (1,) shard broadcasts silently).
 6. ZeRO-2 on a flat buffer (dp8): ravel_pytree of the grads, reshape to
    (n, k), psum_scatter(tiled=False) then / n, optax.adamw on the owned
    slice with a sharded flat state, all_gather of the updated slices,
    unravel. Bugs: the buffer reshaped (k, n) and scattered along dim 1
    (each device gets a strided slice), the mean's / n dropped.
 7. optax.MultiSteps(adamw, 4) gradient accumulation on dp4 x sp2 (the step
    that emits): tokens over sp, a masked cross entropy plus z-loss
    normalised by the global token count, grads psum'd over both axes.
    Bugs: grads psum'd over dp only, grads pmean'd on top of the global
    count normalisation.
 8. vocabulary-parallel cross entropy with label smoothing and z-loss
    (dp2 x tp4, check_vma=True so value_and_grad inserts the reductions),
    bf16 compute of f32 master weights, pmax / psum log-sum-exp, optax.adamw.
    Bugs: the smoothing term's mean over the local vocabulary size, the
    target index without the shard offset.
 9. Megatron sequence parallelism (dp2 x tp4): learned positions sliced at
    the shard's offset, RMSNorm on the sequence shard, all_gather over the
    sequence before the column-parallel matmul, psum_scatter over it after
    the row-parallel one, grads of the replicated norm scale and positions
    psum'd over (dp, tp), optax.sgd Nesterov. Bugs: the norm scale's grad
    psum'd over dp only, the positions sliced without the offset.
GSPMD pairs (jax.jit with in/out shardings; correct): 10. the "Distributed
arrays" tutorial step with with_sharding_constraint between layers and
optax.adamw (dp4 x tp2); 11. a token model whose params and activations are
sharded by Flax-style logical axis rules written by hand, label smoothing +
z-loss, chain(clip_by_global_norm, sgd momentum) (dp2 x tp4); 12. scan over
remat'd layers with bf16 compute of f32 master weights under
optax.MultiSteps(adamw) (dp4 x tp2); 13. FSDP by annotations only (fsdp8)
with chain(clip_by_global_norm, adamw).
Numerics: correct pairs agree at rounding level (f32 about 1e-6, the bf16
ones at bf16 rounding of the logits); bug variants differ clearly.
Run from the repository root: bash samples/gen/run_fresh128.sh [SUBSTR...]
"""
import sys
import numpy as np
import jax, jax.numpy as jnp
import optax
from jax import lax
from jax.flatten_util import ravel_pytree
from jax.sharding import NamedSharding, PartitionSpec as P
sys.path.insert(0, "samples/gen")  # run from the repository root (run_fresh128.sh)
from fresh_lib import Corpus, seeded, state_specs, np_tree  # noqa: E402
from scalify_jax._export import make_mesh  # noqa: E402

SCRIPT = "samples/gen/fresh128.py"
C = Corpus("samples/fresh128", SCRIPT, "samples/gen/run_fresh128.sh", sys.argv[1:])
rng, R, I = seeded(128128)
psum, pmean, pmax, idx = lax.psum, lax.pmean, lax.pmax, lax.axis_index
all_gather, psum_scatter = lax.all_gather, lax.psum_scatter
bf = jnp.bfloat16


def warm(opt, p, steps=3):
    """opt's state after `steps` updates on random gradients (params unchanged)."""
    s = opt.init(p)
    for _ in range(steps):
        g = jax.tree.map(lambda a: R(*np.shape(a), scale=0.2), p)
        _, s = opt.update(g, s, p)
    return np_tree(s)


def step_with(opt, loss):
    """The single-device step every baseline is: value_and_grad, update, apply."""
    def step(p, s, *batch):
        l, g = jax.value_and_grad(loss)(p, *batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, l
    return step


# ---------------------------------------------------------------------------
# 1. data parallelism, label smoothing, SGD with momentum.
B1, D1, H1, C1 = 32, 8, 16, 8
OPT1 = optax.sgd(0.1, momentum=0.9)


def mlp1(p, x):
    return jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def loss1(p, x, y):
    labels = optax.smooth_labels(jax.nn.one_hot(y, C1), 0.1)
    return jnp.mean(optax.softmax_cross_entropy(mlp1(p, x), labels))


def dp_sgd(bug):
    def f(p, s, x, y):
        l, g = jax.value_and_grad(loss1)(p, x, y)
        g = psum(g, "dp") if bug == "psum-grads" else pmean(g, "dp")
        u, s = OPT1.update(g, s, p)
        return optax.apply_updates(p, u), s, (l if bug == "local-loss" else pmean(l, "dp"))
    return f


P1 = {"w1": R(D1, H1, scale=0.5), "b1": R(H1, scale=0.1), "w2": R(H1, C1, scale=0.5), "b2": R(C1, scale=0.1)}
S1 = warm(OPT1, P1)
C.smap("s.dp_sgd_momentum_label_smoothing.dp8", {"dp": 8}, dp_sgd, (P(), P(), P("dp"), P("dp")),
       (P(), P(), P()), step_with(OPT1, loss1), (P1, S1, R(B1, D1), I(0, C1, B1)),
       bugs=[("psum-grads", ["wrong-collective"]), ("local-loss", ["missing-collective"])])

# ---------------------------------------------------------------------------
# 2. FSDP (tutorial style) with a masked token loss, AdamW.
B2, T2, D2, H2, C2 = 8, 4, 8, 16, 8
OPT2 = optax.adamw(1e-2, weight_decay=0.1)
M2 = np.ones((B2, T2), np.float32)
M2[0, 1:] = 0          # device (0, 0): one valid token
M2[3] = 0              # device (0, 3): none
M2[5, 2:] = 0
M2[6, 0] = 0


def fwd2(p, x):
    return jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def loss2(p, x, y, m):
    ce = optax.softmax_cross_entropy_with_integer_labels(fwd2(p, x), y)
    return jnp.sum(ce * m) / jnp.maximum(jnp.sum(m), 1.0)


def fsdp_adamw(bug):
    def f(p, s, x, y, m):
        full = {k: (v if k == "b2" else all_gather(v, "fsdp", axis=0, tiled=True)) for k, v in p.items()}
        cnt = jnp.sum(m) if bug == "local-token-count" else psum(jnp.sum(m), ("dp", "fsdp"))

        def loss(q):
            ce = optax.softmax_cross_entropy_with_integer_labels(fwd2(q, x), y)
            return jnp.sum(ce * m) / jnp.maximum(cnt, 1.0)
        l, g = jax.value_and_grad(loss)(full)
        gs = {}
        for k, t in g.items():
            if k == "b2":
                gs[k] = psum(t, ("dp", "fsdp"))
            else:
                t = psum_scatter(t, "fsdp", scatter_dimension=0, tiled=True)
                gs[k] = psum(t, "fsdp" if bug == "reduce-wrong-axis" else "dp")
        u, s = OPT2.update(gs, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "fsdp"))
    return f


SPEC2 = {"w1": P("fsdp"), "b1": P("fsdp"), "w2": P("fsdp"), "b2": P()}
P2 = {"w1": R(D2, H2, scale=0.5), "b1": R(H2, scale=0.1), "w2": R(H2, C2, scale=0.5), "b2": R(C2, scale=0.1)}
S2 = warm(OPT2, P2)
SS2 = state_specs(S2, SPEC2)
C.smap("s.fsdp_allgather_psum_scatter_adamw_masked.dp2xfsdp4", {"dp": 2, "fsdp": 4}, fsdp_adamw,
       (SPEC2, SS2, P(("dp", "fsdp")), P(("dp", "fsdp")), P(("dp", "fsdp"))), (SPEC2, SS2, P()),
       step_with(OPT2, loss2), (P2, S2, R(B2, T2, D2), I(0, C2, B2, T2), M2),
       bugs=[("local-token-count", ["wrong-denominator"]), ("reduce-wrong-axis", ["wrong-axis"])])

# ---------------------------------------------------------------------------
# 3. Megatron f / g operators, two residual blocks, clip + AdamW.
B3, D3, H3 = 16, 8, 32
CLIP3 = 0.05


@jax.custom_vjp
def f_op(x):          # identity forward, all-reduce of the cotangent backward
    return x


f_op.defvjp(lambda x: (x, None), lambda _, g: (psum(g, "tp"),))


@jax.custom_vjp
def f_op_nobwd(x):
    return x


f_op_nobwd.defvjp(lambda x: (x, None), lambda _, g: (g,))


@jax.custom_vjp
def g_op(x):          # all-reduce forward, identity backward
    return psum(x, "tp")


g_op.defvjp(lambda x: (psum(x, "tp"), None), lambda _, g: (g,))


def clip_global_tp(max_norm, specs):
    """clip_by_global_norm for a tree whose leaves with a 'tp' spec are sharded."""
    def update(g, state, params=None):
        sh = sum(jnp.sum(jnp.square(t)) for t, sp in zip(jax.tree.leaves(g), jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))) if "tp" in sp)
        rep = sum(jnp.sum(jnp.square(t)) for t, sp in zip(jax.tree.leaves(g), jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))) if "tp" not in sp)
        norm = jnp.sqrt(psum(sh, "tp") + rep)
        c = jnp.where(norm < max_norm, 1.0, max_norm / norm)
        return jax.tree.map(lambda t: t * c, g), state
    return optax.GradientTransformation(lambda p: optax.EmptyState(), update)


SPEC3 = [{"w1": P(None, "tp"), "w2": P("tp", None), "b": P()} for _ in range(2)]
OPT3 = optax.chain(optax.clip_by_global_norm(CLIP3), optax.adamw(5e-3, weight_decay=0.05))
OPT3_TP = optax.chain(clip_global_tp(CLIP3, SPEC3), optax.adamw(5e-3, weight_decay=0.05))


def loss3(p, x, t):
    for blk in p:
        x = x + jax.nn.gelu(x @ blk["w1"]) @ blk["w2"] + blk["b"]
    return jnp.mean(jnp.square(x - t))


def megatron_fg(bug):
    def f(p, s, x, t):
        def loss(p):
            h = x
            for blk in p:
                hin = f_op_nobwd(h) if bug == "f-identity-bwd" else f_op(h)
                h = h + g_op(jax.nn.gelu(hin @ blk["w1"]) @ blk["w2"]) + blk["b"]
            return jnp.mean(jnp.square(h - t))
        l, g = jax.value_and_grad(loss)(p)
        g = pmean(g, "dp")
        opt = OPT3 if bug == "clip-no-psum" else OPT3_TP
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, pmean(l, "dp")
    return f


P3 = [{"w1": R(D3, H3, scale=0.4), "w2": R(H3, D3, scale=0.3), "b": R(D3, scale=0.1)} for _ in range(2)]
S3 = warm(OPT3, P3)


def _ss3(state):  # state_specs keys on dict keys only; the list index of the block matters here
    def spec(path, leaf):
        ks = [k for k in path if isinstance(k, (jax.tree_util.SequenceKey, jax.tree_util.DictKey))]
        if len(ks) >= 2 and isinstance(ks[-1], jax.tree_util.DictKey) and np.ndim(leaf) >= 1:
            return SPEC3[0][ks[-1].key]
        return P()
    return jax.tree_util.tree_map_with_path(spec, state)


SS3 = _ss3(S3)
C.smap("s.megatron_f_g_custom_vjp_clip_adamw.dp2xtp4", {"dp": 2, "tp": 4}, megatron_fg,
       (SPEC3, SS3, P("dp"), P("dp")), (SPEC3, SS3, P()), step_with(OPT3, loss3),
       (P3, S3, R(B3, D3), R(B3, D3)),
       bugs=[("clip-no-psum", ["missing-collective"]), ("f-identity-bwd", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 4. collective matmul (all-gather of the lhs by ppermutes), SGD with momentum.
B4, D4, F4, N4 = 16, 8, 16, 8
OPT4 = optax.sgd(0.05, momentum=0.9)


def loss4(p, x, y):
    return jnp.mean(jnp.square(jnp.tanh(x @ p["w0"]) @ p["w1"] - y))


def collective_matmul(bug):
    def f(p, s, x, y):
        me = idx("tp")

        def cm(lhs, rhs):   # (B/n, D) rows of this device times (D, F/n) -> (B, F/n)
            bl = lhs.shape[0]
            if bug == "ppermute-reversed":
                perm = [(j, (j + 1) % N4) for j in range(N4)]
            else:
                perm = [(j, (j - 1) % N4) for j in range(N4)]

            def body(i, carry):
                out, lhs = carry
                out = lax.dynamic_update_slice_in_dim(out, lhs @ rhs, ((me + i) % N4) * bl, axis=0)
                return out, lax.ppermute(lhs, "tp", perm)
            out0 = jnp.zeros((bl * N4, rhs.shape[1]), lhs.dtype)
            return lax.fori_loop(0, N4, body, (out0, lhs))[0]

        def loss(p):
            out = cm(jnp.tanh(x @ p["w0"]), p["w1"])
            return jnp.sum(jnp.square(out - y)) / (B4 * F4)
        l, g = jax.value_and_grad(loss)(p)
        if bug != "w0-grad-no-psum":
            g["w0"] = psum(g["w0"], "tp")
        u, s = OPT4.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "tp")
    return f


SPEC4 = {"w0": P(), "w1": P(None, "tp")}
P4 = {"w0": R(D4, D4, scale=0.5), "w1": R(D4, F4, scale=0.5)}
S4 = warm(OPT4, P4)
SS4 = state_specs(S4, SPEC4)
C.smap("s.collective_matmul_ppermute_fori_sgd.tp8", {"tp": 8}, collective_matmul,
       (SPEC4, SS4, P("tp"), P(None, "tp")), (SPEC4, SS4, P()), step_with(OPT4, loss4),
       (P4, S4, R(B4, D4), R(B4, F4)),
       bugs=[("ppermute-reversed", ["wrong-permutation"]), ("w0-grad-no-psum", ["missing-all-reduce"])])

# ---------------------------------------------------------------------------
# 5. scan over remat'd layers, ZeRO-3 over (dp, fsdp), gather inside the body.
L5, B5, D5 = 3, 16, 8
OPT5 = optax.adamw(1e-2, weight_decay=0.1)
AX5 = ("dp", "fsdp")
POLICY5 = jax.checkpoint_policies.dots_with_no_batch_dims_saveable


def layer5(h, w, sc):
    z = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * sc
    return h + jnp.tanh(z @ w)


def loss5(p, x, t):
    def body(h, wl):
        return layer5(h, *wl), None
    h, _ = lax.scan(jax.checkpoint(body, policy=POLICY5), x, (p["w"], p["scale"]))
    return jnp.mean(jnp.square(h - t))


def zero3_scan(bug):
    def f(p, s, x, t):
        ax = ("fsdp", "dp") if bug == "gather-axis-order" else AX5

        def body(h, wl):
            w, sc = wl
            w = all_gather(w, ax, axis=0, tiled=True)
            if bug != "scale-not-gathered":
                sc = all_gather(sc, ax, axis=0, tiled=True)
            return layer5(h, w, sc), None

        def loss(p):
            h, _ = lax.scan(jax.checkpoint(body, policy=POLICY5), x, (p["w"], p["scale"]))
            return jnp.sum(jnp.square(h - t)) / (B5 * D5)
        l, g = jax.value_and_grad(loss)(p)   # the gather's transpose sums over all devices
        u, s = OPT5.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, AX5)
    return f


SPEC5 = {"w": P(None, AX5), "scale": P(None, AX5)}
P5 = {"w": R(L5, D5, D5, scale=0.4), "scale": 1.0 + R(L5, D5, scale=0.2)}
S5 = warm(OPT5, P5)
SS5 = state_specs(S5, SPEC5)
C.smap("s.scan_remat_zero3_gather_in_body_adamw.dp2xfsdp4", {"dp": 2, "fsdp": 4}, zero3_scan,
       (SPEC5, SS5, P(AX5), P(AX5)), (SPEC5, SS5, P()), step_with(OPT5, loss5),
       (P5, S5, R(B5, D5), R(B5, D5)),
       bugs=[("gather-axis-order", ["wrong-permutation"]), ("scale-not-gathered", ["missing-all-gather"])])

# ---------------------------------------------------------------------------
# 6. ZeRO-2 on a flat buffer: reduce-scatter, owned-slice AdamW, all-gather.
B6, D6, H6, C6, N6 = 32, 8, 16, 8, 8
OPT6 = optax.adamw(1e-2, weight_decay=0.05)


def loss6(p, x, y):
    logits = jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, y))


def step6_ref(p, s, x, y):
    l, g = jax.value_and_grad(loss6)(p, x, y)
    flat, unravel = ravel_pytree(p)
    u, s = OPT6.update(ravel_pytree(g)[0], s, flat)
    return unravel(optax.apply_updates(flat, u)), s, l


def zero2_flat(bug):
    def f(p, s, x, y):
        l, g = jax.value_and_grad(loss6)(p, x, y)
        flat, unravel = ravel_pytree(p)
        gf = ravel_pytree(g)[0]
        k = gf.size // N6
        if bug == "scatter-strided":
            gs = psum_scatter(gf.reshape(k, N6), "dp", scatter_dimension=1, tiled=False)
        else:
            gs = psum_scatter(gf.reshape(N6, k), "dp", scatter_dimension=0, tiled=False)
        if bug != "no-mean":
            gs = gs / N6
        mine = lax.dynamic_slice_in_dim(flat, idx("dp") * k, k)
        u, s = OPT6.update(gs, s, mine)
        new = all_gather(optax.apply_updates(mine, u), "dp", tiled=True)
        return unravel(new), s, pmean(l, "dp")
    return f


P6 = {"w1": R(D6, H6, scale=0.5), "b1": R(H6, scale=0.1), "w2": R(H6, C6, scale=0.5), "b2": R(C6, scale=0.1)}
S6 = warm(OPT6, ravel_pytree(P6)[0])
SS6 = jax.tree.map(lambda a: P("dp") if np.ndim(a) == 1 else P(), S6)
C.smap("s.zero2_flat_buffer_reduce_scatter_adamw.dp8", {"dp": 8}, zero2_flat, (P(), SS6, P("dp"), P("dp")),
       (P(), SS6, P()), step6_ref, (P6, S6, R(B6, D6), I(0, C6, B6)),
       bugs=[("scatter-strided", ["wrong-dimension"]), ("no-mean", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 7. optax.MultiSteps accumulation (the emitting step), z-loss, dp x sp.
B7, T7, D7, V7 = 8, 8, 8, 16
OPT7 = optax.MultiSteps(optax.adamw(1e-2, weight_decay=0.1), every_k_schedule=4)
ZC = 1e-3
M7 = np.ones((B7, T7), np.float32)
M7[0, 2:] = 0
M7[3, :5] = 0
M7[6, 4:] = 0   # device (dp 3, sp 1) has no valid token
M7[7, 4:] = 0


def tok_loss7(p, x, y):
    logits = jnp.tanh(x @ p["w1"]) @ p["w2"]
    lse = jax.nn.logsumexp(logits, -1)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return ce + ZC * jnp.square(lse)


def loss7(p, x, y, m):
    return jnp.sum(tok_loss7(p, x, y) * m) / jnp.maximum(jnp.sum(m), 1.0)


def multisteps_dp_sp(bug):
    def f(p, s, x, y, m):
        cnt = jnp.maximum(psum(jnp.sum(m), ("dp", "sp")), 1.0)

        def loss(p):
            return jnp.sum(tok_loss7(p, x, y) * m) / cnt
        l, g = jax.value_and_grad(loss)(p)
        if bug == "reduce-dp-only":
            g = psum(g, "dp")
        elif bug == "pmean-double-normalise":
            g = pmean(g, ("dp", "sp"))
        else:
            g = psum(g, ("dp", "sp"))
        u, s = OPT7.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "sp"))
    return f


P7 = {"w1": R(D7, D7, scale=0.5), "w2": R(D7, V7, scale=0.5)}
S7 = warm(OPT7, P7, steps=7)   # mini_step == 3: this step emits
C.smap("s.multisteps_accum_zloss_global_count.dp4xsp2", {"dp": 4, "sp": 2}, multisteps_dp_sp,
       (P(), P(), P("dp", "sp"), P("dp", "sp"), P("dp", "sp")), (P(), P(), P()), step_with(OPT7, loss7),
       (P7, S7, R(B7, T7, D7), I(0, V7, B7, T7), M7),
       bugs=[("reduce-dp-only", ["wrong-axis"]), ("pmean-double-normalise", ["wrong-scale"])])

# ---------------------------------------------------------------------------
# 8. vocabulary-parallel cross entropy, label smoothing, z-loss, bf16 compute.
B8, D8, V8 = 8, 16, 32
EPS8, Z8 = 0.1, 1e-3
OPT8 = optax.adamw(3e-3, weight_decay=0.05)


def logits8(p, x):
    h = jax.nn.gelu(jnp.dot(x.astype(bf), p["wh"].astype(bf)))
    return jnp.dot(h, p["wo"].astype(bf)).astype(jnp.float32)


def loss8(p, x, y):
    z = logits8(p, x)
    lse = jax.nn.logsumexp(z, -1)
    ce = optax.softmax_cross_entropy(z, optax.smooth_labels(jax.nn.one_hot(y, V8), EPS8))
    return jnp.mean(ce + Z8 * jnp.square(lse))


def vocab_parallel_ce(bug):
    def f(p, s, x, y):
        def loss(p):
            z = logits8(p, x)                      # (B/dp, V/tp)
            vl = z.shape[-1]
            off = idx("tp") * vl
            m = pmax(lax.stop_gradient(jnp.max(z, -1)), "tp")
            lse = jnp.log(psum(jnp.sum(jnp.exp(z - m[:, None]), -1), "tp")) + m
            local_y = y if bug == "target-no-offset" else y - off
            hit = (local_y[:, None] == jnp.arange(vl)[None, :])
            zt = psum(jnp.sum(jnp.where(hit, z, 0.0), -1), "tp")
            zsum = psum(jnp.sum(z, -1), "tp")
            zmean = zsum / vl if bug == "smoothing-local-vocab" else zsum / V8
            ce = lse - (1.0 - EPS8) * zt - EPS8 * zmean
            return jnp.sum(ce + Z8 * jnp.square(lse)) / B8
        l, g = jax.value_and_grad(loss)(p)    # check_vma: the dp / tp reductions are inserted
        u, s = OPT8.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, "dp")
    return f


SPEC8 = {"wh": P(), "wo": P(None, "tp")}
P8 = {"wh": R(D8, D8, scale=0.4), "wo": R(D8, V8, scale=0.5)}
S8 = warm(OPT8, P8)
SS8 = state_specs(S8, SPEC8)
C.smap("s.vocab_parallel_ce_smoothing_zloss_bf16.dp2xtp4", {"dp": 2, "tp": 4}, vocab_parallel_ce,
       (SPEC8, SS8, P("dp"), P("dp")), (SPEC8, SS8, P()), step_with(OPT8, loss8),
       (P8, S8, R(B8, D8), I(0, V8, B8)), check_vma=True,
       bugs=[("smoothing-local-vocab", ["wrong-denominator"]), ("target-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# 9. Megatron sequence parallelism: all_gather / psum_scatter over the sequence.
B9, T9, D9, H9 = 4, 16, 8, 16
OPT9 = optax.sgd(0.1, momentum=0.9, nesterov=True)


def block9(p, x):
    h = x + p["pos"][None]
    hn = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * p["g"]
    return h + jax.nn.gelu(hn @ p["w1"]) @ p["w2"]


def loss9(p, x, t):
    return jnp.mean(jnp.square(block9(p, x) - t))


def seq_parallel(bug):
    def f(p, s, x, t):
        tl = x.shape[1]

        def loss(p):
            start = 0 if bug == "pos-no-offset" else idx("tp") * tl
            h = x + lax.dynamic_slice_in_dim(p["pos"], start, tl)[None]
            hn = h * lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + 1e-6) * p["g"]
            hn = all_gather(hn, "tp", axis=1, tiled=True)           # (b, T, D)
            part = jax.nn.gelu(hn @ p["w1"]) @ p["w2"]               # partial sums over tp
            y = psum_scatter(part, "tp", scatter_dimension=1, tiled=True)
            return jnp.sum(jnp.square(h + y - t)) / (B9 * T9 * D9)
        l, g = jax.value_and_grad(loss)(p)
        g = {"w1": psum(g["w1"], "dp"), "w2": psum(g["w2"], "dp"), "pos": psum(g["pos"], ("dp", "tp")),
             "g": psum(g["g"], "dp" if bug == "norm-grad-dp-only" else ("dp", "tp"))}
        u, s = OPT9.update(g, s, p)
        return optax.apply_updates(p, u), s, psum(l, ("dp", "tp"))
    return f


SPEC9 = {"pos": P(), "g": P(), "w1": P(None, "tp"), "w2": P("tp", None)}
P9 = {"pos": R(T9, D9, scale=0.3), "g": 1.0 + R(D9, scale=0.2), "w1": R(D9, H9, scale=0.4),
      "w2": R(H9, D9, scale=0.3)}
S9 = warm(OPT9, P9)
SS9 = state_specs(S9, SPEC9)
C.smap("s.megatron_sequence_parallel_gather_scatter_nesterov.dp2xtp4", {"dp": 2, "tp": 4}, seq_parallel,
       (SPEC9, SS9, P("dp", "tp"), P("dp", "tp")), (SPEC9, SS9, P()), step_with(OPT9, loss9),
       (P9, S9, R(B9, T9, D9), R(B9, T9, D9)),
       bugs=[("norm-grad-dp-only", ["missing-all-reduce"]), ("pos-no-offset", ["wrong-offset"])])

# ---------------------------------------------------------------------------
# GSPMD pairs.
# 10. "Distributed arrays" tutorial: NamedSharding inputs, constraints between layers.
M10 = make_mesh({"dp": 4, "tp": 2})
OPT10 = optax.adamw(1e-2, weight_decay=0.1)


def wsc10(a, *spec):
    return jax.lax.with_sharding_constraint(a, NamedSharding(M10, P(*spec)))


def loss10(p, x, y):
    h = wsc10(jnp.tanh(x @ p["w1"] + p["b1"]), "dp", "tp")
    h = wsc10(jax.nn.relu(h @ p["w2"]), "dp", None)
    return jnp.mean(jnp.square(h @ p["w3"] - y))


SPEC10 = {"w1": P(None, "tp"), "b1": P("tp"), "w2": P("tp", None), "w3": P()}
P10 = {"w1": R(8, 16, scale=0.5), "b1": R(16, scale=0.1), "w2": R(16, 8, scale=0.4), "w3": R(8, 4, scale=0.5)}
S10 = warm(OPT10, P10)
SS10 = state_specs(S10, SPEC10)
C.gspmd("g.distributed_arrays_tutorial_wsc_adamw.dp4xtp2", {"dp": 4, "tp": 2},
        (SPEC10, SS10, P("dp"), P("dp")), (SPEC10, SS10, P()), step_with(OPT10, loss10),
        (P10, S10, R(16, 8), R(16, 4)))

# 11. Flax-style logical axis rules, written by hand.
M11 = make_mesh({"dp": 2, "tp": 4})
RULES11 = (("batch", "dp"), ("seq", None), ("embed", None), ("mlp", "tp"), ("vocab", "tp"))


def logical(*names):
    rules = dict(RULES11)
    return P(*[rules.get(n) for n in names])


def constrain(a, *names):
    return jax.lax.with_sharding_constraint(a, NamedSharding(M11, logical(*names)))


AXES11 = {"embed": ("vocab", "embed"), "w1": ("embed", "mlp"), "w2": ("mlp", "embed"), "head": ("embed", "vocab")}
SPEC11 = {k: logical(*v) for k, v in AXES11.items()}
V11, E11, F11 = 32, 8, 16
OPT11 = optax.chain(optax.clip_by_global_norm(0.5), optax.sgd(0.1, momentum=0.9))


def loss11(p, ids, y):
    h = constrain(jnp.take(p["embed"], ids, axis=0), "batch", "seq", "embed")
    a = constrain(jax.nn.silu(h @ p["w1"]), "batch", "seq", "mlp")
    h = constrain(h + a @ p["w2"], "batch", "seq", "embed")
    z = constrain(h @ p["head"], "batch", "seq", "vocab")
    lse = jax.nn.logsumexp(z, -1)
    ce = optax.softmax_cross_entropy(z, optax.smooth_labels(jax.nn.one_hot(y, V11), 0.1))
    return jnp.mean(ce + 1e-3 * jnp.square(lse))


P11 = {"embed": R(V11, E11, scale=0.5), "w1": R(E11, F11, scale=0.4), "w2": R(F11, E11, scale=0.4),
       "head": R(E11, V11, scale=0.5)}
S11 = warm(OPT11, P11)
SS11 = state_specs(S11, SPEC11)
C.gspmd("g.logical_axis_rules_smoothing_zloss_clip_sgd.dp2xtp4", {"dp": 2, "tp": 4},
        (SPEC11, SS11, logical("batch", "seq"), logical("batch", "seq")), (SPEC11, SS11, P()),
        step_with(OPT11, loss11), (P11, S11, I(0, V11, 4, 8), I(0, V11, 4, 8)))

# 12. scan over remat'd layers, bf16 compute of f32 master weights, MultiSteps.
OPT12 = optax.MultiSteps(optax.adamw(5e-3, weight_decay=0.05), every_k_schedule=2)


def loss12(p, x, t):
    def body(h, w):
        a = jax.nn.gelu(jnp.dot(h.astype(bf), w["w1"].astype(bf)))
        return h + jnp.dot(a, w["w2"].astype(bf)).astype(jnp.float32), None
    body = jax.checkpoint(body, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
    h, _ = lax.scan(body, x, p["layers"])
    return jnp.mean(jnp.square(h - t))


SPEC12 = {"layers": {"w1": P(None, None, "tp"), "w2": P(None, "tp", None)}}
P12 = {"layers": {"w1": R(3, 8, 16, scale=0.4), "w2": R(3, 16, 8, scale=0.3)}}
S12 = warm(OPT12, P12, steps=3)   # mini_step == 1: this step emits
SS12 = state_specs(S12, SPEC12)
C.gspmd("g.scan_remat_bf16_master_multisteps.dp4xtp2", {"dp": 4, "tp": 2},
        (SPEC12, SS12, P("dp"), P("dp")), (SPEC12, SS12, P()), step_with(OPT12, loss12),
        (P12, S12, R(16, 8), R(16, 8)))

# 13. FSDP by annotations only, clip + AdamW.
OPT13 = optax.chain(optax.clip_by_global_norm(0.3), optax.adamw(1e-2, weight_decay=0.1))


def loss13(p, x, y):
    h = jax.nn.gelu(x @ p["w1"] + p["b1"])
    z = h @ p["w2"]
    lse = jax.nn.logsumexp(z, -1)
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(z, y) + 1e-3 * jnp.square(lse))


SPEC13 = {"w1": P("fsdp"), "b1": P("fsdp"), "w2": P("fsdp")}
P13 = {"w1": R(8, 16, scale=0.5), "b1": R(16, scale=0.1), "w2": R(16, 8, scale=0.5)}
S13 = warm(OPT13, P13)
SS13 = state_specs(S13, SPEC13)
C.gspmd("g.fsdp_annotations_clip_adamw.fsdp8", {"fsdp": 8},
        (SPEC13, SS13, P("fsdp"), P("fsdp")), (SPEC13, SS13, P()), step_with(OPT13, loss13),
        (P13, S13, R(16, 8), I(0, 8, 16)))

C.finish()
