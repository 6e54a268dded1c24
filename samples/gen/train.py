"""Hand-written training steps (shard_map) and their bug variants.

Each `make_*` returns a Program: the per-device step (same signature and
parameter order as the baseline), in/out PartitionSpecs, the mesh, the plain
single-device baseline step (same math on global arrays) and seeded concrete
inputs. A step is forward, loss, jax.grad and an optimizer update; its outputs
are the updated parameters (and optimizer state) and the loss. `bug` selects one
realistic mistake, tagged `# BUG(<id>)`; `# BUG-SITE(<id>)` tags the line that
consumes what a mistake emitting no HLO of its own leaves wrong (samples/train/README.md).

New programs go at the end of this file: the exported HLO records the source
lines of every operation.
"""
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

B, H, F, O = 8, 32, 64, 16      # batch, input/hidden, ffn, output widths
LR = 0.5


class Program:
    def __init__(self, family, mesh, fn, in_specs, out_specs, baseline, args,
                 check_vma=False, outputs=("params", "loss")):
        self.family = family
        self.outputs = outputs    # names of the top-level outputs of the step
        self.mesh = mesh
        self.fn = fn
        self.in_specs = in_specs
        self.out_specs = out_specs
        self.baseline = baseline
        self.args = args          # concrete inputs (numpy), global shapes
        self.check_vma = check_vma

    def smap(self):
        return jax.shard_map(self.fn, mesh=self.mesh, in_specs=self.in_specs,
                             out_specs=self.out_specs, check_vma=self.check_vma)


def rand(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp_params(rng):
    return {"w1": rand(rng, (H, F), 1 / np.sqrt(H)), "b1": rand(rng, (F,), 0.1),
            "w2": rand(rng, (F, O), 1 / np.sqrt(F)), "b2": rand(rng, (O,), 0.1)}


def mlp(p, x):
    with jax.named_scope("mlp"):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return h @ p["w2"] + p["b2"]


def per_example_loss(p, x, y):
    with jax.named_scope("loss"):
        return jnp.sum((mlp(p, x) - y) ** 2, axis=-1)


def mse(p, x, y):
    return jnp.mean(per_example_loss(p, x, y))


def sgd(p, g, lr=LR):
    with jax.named_scope("optimizer"):
        return jax.tree.map(lambda w, d: w - lr * d, p, g)  # BUG-SITE(dp-missing-pmean)


def mlp_data(seed, batch=B):
    rng = np.random.default_rng(seed)
    return mlp_params(rng), rand(rng, (batch, H)), rand(rng, (batch, O))


def replicated(tree):
    return jax.tree.map(lambda _: P(), tree)


def sgd_baseline(params, x, y):
    loss, g = jax.value_and_grad(mse)(params, x, y)
    return sgd(params, g), loss


# --------------------------------------------------------------------------
# 1. Data-parallel SGD: batch sharded on dp, local mean loss, pmean'd gradients.
#    DP may name several mesh axes (a 2-D data-parallel mesh).
# --------------------------------------------------------------------------

def make_dp_sgd(mesh, bug=None, DP="dp"):
    def step(params, x, y):
        loss, g = jax.value_and_grad(mse)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "dp-psum-grads":
                g = jax.lax.psum(g, DP)                     # BUG(dp-psum-grads)
            elif bug == "dp2d-pmean-one-axis":
                g = jax.lax.pmean(g, DP[1])                 # BUG(dp2d-pmean-one-axis)
            elif bug != "dp-missing-pmean":
                g = jax.lax.pmean(g, DP)                    # BUG(dp-missing-pmean)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(1)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.dp_sgd", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 2. Data-parallel Adam (optax.adam with its step counter) on pmean'd
#    gradients. The optimizer state comes in as an input (a later step: count
#    3, non-zero moments), so a gradient scaled by the device count changes the
#    update (on the first step Adam's update is nearly scale-invariant).
# --------------------------------------------------------------------------

ADAM = dict(learning_rate=0.05, b1=0.9, b2=0.999, eps=1e-8)


def adam_state(params, rng):
    import optax
    state = optax.adam(**ADAM).init(params)
    adam = state[0]._replace(
        count=np.int32(3),
        mu=jax.tree.map(lambda p: rand(rng, p.shape, 0.05), params),
        nu=jax.tree.map(lambda p: np.abs(rand(rng, p.shape, 0.01)), params))
    return (adam,) + tuple(state[1:])


def adam_update(params, opt_state, g):
    import optax
    with jax.named_scope("optimizer"):
        updates, opt_state = optax.adam(**ADAM).update(g, opt_state, params)
        return optax.apply_updates(params, updates), opt_state


def adam_baseline(params, opt_state, x, y):
    loss, g = jax.value_and_grad(mse)(params, x, y)
    params, opt_state = adam_update(params, opt_state, g)
    return params, opt_state, loss


def make_dp_adam(mesh, bug=None, DP="dp"):
    def step(params, opt_state, x, y):
        loss, g = jax.value_and_grad(mse)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "adam-psum-grads":
                g = jax.lax.psum(g, DP)                     # BUG(adam-psum-grads)
            else:
                g = jax.lax.pmean(g, DP)
            loss = jax.lax.pmean(loss, DP)
        params, opt_state = adam_update(params, opt_state, g)
        return params, opt_state, loss

    params, x, y = mlp_data(2)
    state = adam_state(params, np.random.default_rng(12))
    in_specs = (replicated(params), replicated(state), P(DP), P(DP))
    out_specs = (replicated(params), replicated(state), P())
    return Program("mlp.dp_adam", mesh, step, in_specs, out_specs, adam_baseline,
                   (params, state, x, y), outputs=("params", "opt_state", "loss"))


# --------------------------------------------------------------------------
# 3. Data-parallel SGD normalised by the global batch: each device divides its
#    sum of per-example losses by the global batch size; gradients and loss are
#    psum'd.
# --------------------------------------------------------------------------

def make_dp_sgd_global(mesh, bug=None, DP="dp"):
    n = mesh.shape[DP]

    def step(params, x, y):
        def loss_fn(p):
            per = per_example_loss(p, x, y)
            if bug == "global-local-count":
                return jnp.sum(per) / per.shape[0]          # BUG(global-local-count)
            return jnp.sum(per) / (per.shape[0] * n)
        loss, g = jax.value_and_grad(loss_fn)(params)
        with jax.named_scope("grad_sync"):
            g = jax.lax.psum(g, DP)
            loss = jax.lax.psum(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(3)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.dp_sgd_global", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# Megatron's conjugate operators for tensor parallelism under
# shard_map(check_vma=False): `copy_to_tp` is the identity forward and an
# all-reduce of the gradient backward; `reduce_from_tp` all-reduces forward and
# passes the gradient through backward. (A bare psum in the forward transposes
# to another psum under check_vma=False: gradients tp times too large.)
# --------------------------------------------------------------------------

def tp_ops(TP):
    @jax.custom_vjp
    def copy_to_tp(x):
        return x

    def copy_fwd(x):
        return x, None

    def copy_bwd(_, g):
        return (jax.lax.psum(g, TP),)

    copy_to_tp.defvjp(copy_fwd, copy_bwd)

    @jax.custom_vjp
    def reduce_from_tp(x):
        return jax.lax.psum(x, TP)

    def reduce_fwd(x):
        return jax.lax.psum(x, TP), None

    def reduce_bwd(_, g):
        return (g,)

    reduce_from_tp.defvjp(reduce_fwd, reduce_bwd)
    return copy_to_tp, reduce_from_tp


# --------------------------------------------------------------------------
# 4. dp x tp: the MLP with a column-parallel w1/b1 and a row-parallel w2 over
#    tp (reduce_from_tp), batch on dp, gradients pmean'd over dp.
# --------------------------------------------------------------------------

def make_dp_tp_mlp(mesh, bug=None, DP="dp", TP="tp"):
    _, reduce_from_tp = tp_ops(TP)

    def local_loss(p, x, y):
        with jax.named_scope("mlp"):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            if bug == "tp-bare-psum":
                out = jax.lax.psum(h @ p["w2"], TP) + p["b2"]   # BUG(tp-bare-psum)
            else:
                out = reduce_from_tp(h @ p["w2"]) + p["b2"]
        with jax.named_scope("loss"):
            return jnp.mean(jnp.sum((out - y) ** 2, axis=-1))

    def step(params, x, y):
        loss, g = jax.value_and_grad(local_loss)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "tp-pmean-wrong-axis":
                g = jax.lax.pmean(g, TP)                    # BUG(tp-pmean-wrong-axis)
            else:
                g = jax.lax.pmean(g, DP)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(4)
    pspec = {"w1": P(None, TP), "b1": P(TP), "w2": P(TP, None), "b2": P()}
    in_specs = (pspec, P(DP), P(DP))
    out_specs = (pspec, P())
    return Program("mlp.dp_tp", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 5. FSDP / ZeRO-3: every parameter sharded on dim 0 over dp; all_gather before
#    use, gradients reduce-scattered (psum_scatter) back to shards and divided by
#    the device count, the update on the shards.
# --------------------------------------------------------------------------

def make_fsdp(mesh, bug=None, DP="dp"):
    n = mesh.shape[DP]

    def gather(k, w):
        if bug == "fsdp-gather-wrong-dim" and k == "w1":
            full = (w.shape[0] * n,) + w.shape[1:]
            return jax.lax.all_gather(w, DP, axis=1, tiled=True).reshape(full)  # BUG(fsdp-gather-wrong-dim)
        return jax.lax.all_gather(w, DP, axis=0, tiled=True)

    def step(params, x, y):
        with jax.named_scope("fsdp_gather"):
            full = {k: gather(k, w) for k, w in params.items()}
        loss, g = jax.value_and_grad(mse)(full, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "fsdp-scatter-no-mean":
                g = jax.tree.map(lambda t: jax.lax.psum_scatter(t, DP, scatter_dimension=0, tiled=True), g)  # BUG(fsdp-scatter-no-mean)
            else:
                g = jax.tree.map(lambda t: jax.lax.psum_scatter(t, DP, scatter_dimension=0,
                                                                tiled=True) / n, g)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(5)
    pspec = jax.tree.map(lambda _: P(DP), params)
    in_specs = (pspec, P(DP), P(DP))
    out_specs = (pspec, P())
    return Program("mlp.fsdp", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 6. Gradient accumulation: each device splits its batch into MICRO
#    microbatches (jax.lax.scan), sums the microbatch gradients, divides by the
#    number of microbatches, then pmean over dp.
# --------------------------------------------------------------------------

MICRO = 2


def accum_sync(params, g, lsum, DP):
    """pmean of the accumulated gradient and mean loss, then the SGD update."""
    with jax.named_scope("grad_sync"):
        g = jax.lax.pmean(g, DP)  # BUG-SITE(accum-unrolled-no-divide)
        loss = jax.lax.pmean(lsum / MICRO, DP)
    return sgd(params, g), loss


def accum_program(family, mesh, step, seed, DP):
    params, x, y = mlp_data(seed, batch=2 * B)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program(family, mesh, step, in_specs, out_specs, sgd_baseline, (params, x, y))


def make_grad_accum(mesh, bug=None, DP="dp"):
    def step(params, x, y):
        xs = x.reshape((MICRO, -1) + x.shape[1:])
        ys = y.reshape((MICRO, -1) + y.shape[1:])

        def micro(carry, xy):
            gsum, lsum = carry
            loss, g = jax.value_and_grad(mse)(params, *xy)
            return (jax.tree.map(jnp.add, gsum, g), lsum + loss), None

        zero = jax.tree.map(jnp.zeros_like, params)
        with jax.named_scope("accumulate"):
            (gsum, lsum), _ = jax.lax.scan(micro, (zero, jnp.float32(0)), (xs, ys))
            if bug == "accum-wrong-count":
                g = jax.tree.map(lambda t: t / x.shape[0], gsum)   # BUG(accum-wrong-count)
            else:
                g = jax.tree.map(lambda t: t / MICRO, gsum)
        return accum_sync(params, g, lsum, DP)

    return accum_program("mlp.grad_accum", mesh, step, 6, DP)


def sgd_baseline_for(loss_fn, lr=LR):
    def step(params, *data):
        loss, g = jax.value_and_grad(loss_fn)(params, *data)
        return sgd(params, g, lr), loss
    return step


# --------------------------------------------------------------------------
# 7. Pipeline: stacked layers w [n,H,H], b [n,H], layer i on stage i of pp;
#    each stage hands its activation to the next with ppermute; the last
#    stage's output is broadcast with reduce_from_pp (psum forward, identity
#    backward). The backward runs through the transposed ppermute.
# --------------------------------------------------------------------------

def pp_layer(w, b, h):
    return jnp.tanh(h @ w + b)


def pp_mse(p, x, y):
    h = x
    for i in range(p["w"].shape[0]):
        with jax.named_scope(f"stage{i}"):
            h = pp_layer(p["w"][i], p["b"][i], h)
    with jax.named_scope("loss"):
        return jnp.mean(jnp.sum((h - y) ** 2, axis=-1))


def make_pipeline(mesh, bug=None, PP="pp"):
    n = mesh.shape[PP]
    _, reduce_from_pp = tp_ops(PP)

    def local_loss(p, x, y):
        r = jax.lax.axis_index(PP)
        h = x
        for s in range(n):
            with jax.named_scope(f"stage{s}"):
                h = pp_layer(p["w"][0], p["b"][0], h)
            if s < n - 1:
                if bug == "pp-permute-direction":
                    h = jax.lax.ppermute(h, PP, perm=[(i + 1, i) for i in range(n - 1)])  # BUG(pp-permute-direction)
                else:
                    h = jax.lax.ppermute(h, PP, perm=[(i, i + 1) for i in range(n - 1)])
        with jax.named_scope("broadcast_last_stage"):
            h = reduce_from_pp(jnp.where(r == n - 1, h, jnp.zeros_like(h)))
        with jax.named_scope("loss"):
            return jnp.mean(jnp.sum((h - y) ** 2, axis=-1))

    def step(params, x, y):
        loss, g = jax.value_and_grad(local_loss)(params, x, y)
        return sgd(params, g), loss

    rng = np.random.default_rng(7)
    params = {"w": rand(rng, (n, H, H), 1.5 / np.sqrt(H)), "b": rand(rng, (n, H), 0.1)}
    x, y = rand(rng, (B, H)), rand(rng, (B, H), 0.5)
    pspec = {"w": P(PP), "b": P(PP)}
    return Program("mlp.pipeline", mesh, step, (pspec, P(), P()), (pspec, P()),
                   sgd_baseline_for(pp_mse), (params, x, y))


# --------------------------------------------------------------------------
# 8. Ring attention (forward): causal attention with the sequence sharded on
#    cp; K/V blocks travel around the ring with ppermute (device i sends to
#    i+1), an online softmax keeps a running max and a running sum, both
#    rescaled when the max grows. Baseline: plain softmax attention.
# --------------------------------------------------------------------------

RB, RS, RH, RD = 2, 16, 2, 8     # batch, sequence, heads, head dim


def causal_attention(q, k, v):
    with jax.named_scope("attn"):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
        S = q.shape[1]
        mask = jnp.tril(jnp.ones((S, S), dtype=bool))
        s = jnp.where(mask[None, None], s, jnp.float32(-1e30))
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)


def make_ring_attention(mesh, bug=None, CP="cp"):
    n = mesh.shape[CP]

    def ring(q, k, v):
        r = jax.lax.axis_index(CP)
        Sl = q.shape[1]
        qpos = r * Sl + jnp.arange(Sl)
        m = jnp.full(q.shape[:1] + (q.shape[2], Sl), -1e30, jnp.float32)
        l = jnp.zeros_like(m)
        acc = jnp.zeros(q.shape[:1] + (q.shape[2], Sl, q.shape[3]), jnp.float32)
        if bug == "ring-permute-direction":
            perm = [(i, (i - 1) % n) for i in range(n)]     # BUG(ring-permute-direction)
        else:
            perm = [(i, (i + 1) % n) for i in range(n)]
        for t in range(n):
            with jax.named_scope(f"ring_step{t}"):
                src = (r - t) % n                           # the block held at step t
                kpos = src * Sl + jnp.arange(Sl)
                s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
                s = jnp.where((kpos[None, :] <= qpos[:, None])[None, None], s, jnp.float32(-1e30))
                m_new = jnp.maximum(m, jnp.max(s, axis=-1))
                corr = jnp.exp(m - m_new)
                p = jnp.exp(s - m_new[..., None])
                if bug == "ring-no-rescale":
                    l = l + jnp.sum(p, axis=-1)             # BUG(ring-no-rescale)
                else:
                    l = l * corr + jnp.sum(p, axis=-1)
                acc = acc * corr[..., None] + jnp.einsum("bhqk,bkhd->bhqd", p, v)
                m = m_new
            if t < n - 1:
                with jax.named_scope("ring_pass"):
                    k = jax.lax.ppermute(k, CP, perm)  # BUG-SITE(ring-permute-direction)
                    v = jax.lax.ppermute(v, CP, perm)  # BUG-SITE(ring-permute-direction)
        with jax.named_scope("normalise"):
            return jnp.transpose(acc / l[..., None], (0, 2, 1, 3))

    rng = np.random.default_rng(8)
    args = tuple(rand(rng, (RB, RS, RH, RD), 1.5) for _ in range(3))
    spec = P(None, CP)
    return Program("attn.ring", mesh, ring, (spec, spec, spec), spec, causal_attention,
                   args, outputs=("out",))


# --------------------------------------------------------------------------
# 9. A tiny transformer LM training step: embedding by token id (jnp.take),
#    RMSNorm, causal attention, MLP, integer-label cross-entropy
#    (take_along_axis), padding mask tokens != 0; the loss is the sum of the
#    token losses over the number of real tokens.
#    dp: the token count is psum'd (an integer all-reduce), gradients psum'd.
#    dp x tp: heads and MLP over tp (copy_to_tp / reduce_from_tp).
# --------------------------------------------------------------------------

LV, LH, LNH, LF, LS = 64, 32, 4, 64, 8     # vocab, hidden, heads, ffn, sequence
LM_LR = 5.0


def rms_norm(x, w, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w  # BUG-SITE(lm-tp-no-copy-grad)


def lm_nll(p, tokens, labels, ops=None):
    """Sum of the token losses and the number of real tokens (int32)."""
    copy_to, reduce_from = ops or (lambda t: t, lambda t: t)
    nh = p["wq"].shape[1] // (LH // LNH)
    hd = LH // LNH
    Bl, S = tokens.shape
    with jax.named_scope("embed"):
        x = jnp.take(p["embed"], tokens, axis=0)
    with jax.named_scope("attn"):
        h = copy_to(rms_norm(x, p["attn_norm"]))
        q = (h @ p["wq"]).reshape(Bl, S, nh, hd)
        k = (h @ p["wk"]).reshape(Bl, S, nh, hd)
        v = (h @ p["wv"]).reshape(Bl, S, nh, hd)
        o = causal_attention(q, k, v).reshape(Bl, S, nh * hd)
        x = x + reduce_from(o @ p["wo"])
    with jax.named_scope("mlp"):
        h = copy_to(rms_norm(x, p["mlp_norm"]))
        x = x + reduce_from(jax.nn.silu(h @ p["w_up"]) @ p["w_down"])
    with jax.named_scope("lm_head"):
        logits = rms_norm(x, p["final_norm"]) @ p["lm_head"]
    with jax.named_scope("loss"):
        logp = jax.nn.log_softmax(logits, axis=-1)
        ll = jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]
        mask = tokens != 0
        return -jnp.sum(jnp.where(mask, ll, 0.0)), jnp.sum(mask.astype(jnp.int32))


def lm_loss(p, tokens, labels):
    nll, count = lm_nll(p, tokens, labels)
    return nll / count.astype(jnp.float32)


def lm_data(seed):
    rng = np.random.default_rng(seed)
    params = {"embed": rand(rng, (LV, LH)), "attn_norm": 1 + rand(rng, (LH,), 0.1),
              "wq": rand(rng, (LH, LH), 1 / np.sqrt(LH)), "wk": rand(rng, (LH, LH), 1 / np.sqrt(LH)),
              "wv": rand(rng, (LH, LH), 1 / np.sqrt(LH)), "wo": rand(rng, (LH, LH), 1 / np.sqrt(LH)),
              "mlp_norm": 1 + rand(rng, (LH,), 0.1), "w_up": rand(rng, (LH, LF), 1 / np.sqrt(LH)),
              "w_down": rand(rng, (LF, LH), 1 / np.sqrt(LF)), "final_norm": 1 + rand(rng, (LH,), 0.1),
              "lm_head": rand(rng, (LH, LV), 1 / np.sqrt(LH))}
    tokens = rng.integers(1, LV, (B, LS)).astype(np.int32)
    lengths = np.array([8, 8, 7, 6, 4, 3, 2, 1])                # uneven over the dp shards
    tokens[np.arange(LS)[None, :] >= lengths[:, None]] = 0      # right padding
    labels = rng.integers(1, LV, (B, LS)).astype(np.int32)
    return params, tokens, labels


def make_lm(mesh, bug=None, DP="dp", TP=None):
    ops = tp_ops(TP) if TP else None

    def step(params, tokens, labels):
        local_ops = ops
        if bug == "lm-tp-no-copy-grad":
            local_ops = (lambda t: t, ops[1])               # BUG(lm-tp-no-copy-grad)
        _, local_count = lm_nll(params, tokens, labels, local_ops)
        with jax.named_scope("token_count"):
            if bug == "lm-local-token-count":
                count = local_count                         # BUG(lm-local-token-count)
            else:
                count = jax.lax.psum(local_count, DP)

        def loss_fn(p):
            nll, _ = lm_nll(p, tokens, labels, local_ops)
            return nll / count.astype(jnp.float32)  # BUG-SITE(lm-local-token-count)
        loss, g = jax.value_and_grad(loss_fn)(params)
        with jax.named_scope("grad_sync"):
            if bug == "lm-local-token-count":
                g, loss = jax.lax.pmean((g, loss), DP)  # BUG(lm-local-token-count)
            else:
                g, loss = jax.lax.psum((g, loss), DP)
        return sgd(params, g, LM_LR), loss

    params, tokens, labels = lm_data(9)
    pspec = {k: P() for k in params}
    if TP:
        pspec.update({"wq": P(None, TP), "wk": P(None, TP), "wv": P(None, TP),
                      "wo": P(TP, None), "w_up": P(None, TP), "w_down": P(TP, None)})
    family = "lm.dp_tp" if TP else "lm.dp"
    return Program(family, mesh, step, (pspec, P(DP), P(DP)), (pspec, P()),
                   sgd_baseline_for(lm_loss, LM_LR), (params, tokens, labels))


# --------------------------------------------------------------------------
# 10. Per-example clipped gradients (the first half of a DP-SGD step) of a
#     linear model: every output is per example, so the distributed program has
#     no collective at all.
# --------------------------------------------------------------------------

CLIP = 1.0


def clipped_per_example(params, x, y):
    def loss_one(p, xi, yi):
        with jax.named_scope("loss"):
            return jnp.sum((xi @ p["w"] + p["b"] - yi) ** 2)
    loss, g = jax.vmap(jax.value_and_grad(loss_one), in_axes=(None, 0, 0))(params, x, y)
    with jax.named_scope("clip"):
        norm = jnp.sqrt(sum(jnp.sum(t.reshape(t.shape[0], -1) ** 2, axis=1)
                            for t in jax.tree.leaves(g)))
        scale = jnp.minimum(1.0, CLIP / (norm + 1e-6))
        g = jax.tree.map(lambda t: t * scale.reshape((-1,) + (1,) * (t.ndim - 1)), g)
    return g, loss


def make_per_example(mesh, DP="dp"):
    rng = np.random.default_rng(10)
    params = {"w": rand(rng, (H, O), 1 / np.sqrt(H)), "b": rand(rng, (O,), 0.1)}
    x, y = rand(rng, (B, H)), rand(rng, (B, O))
    gspec = {"w": P(DP), "b": P(DP)}
    return Program("linear.per_example_clip", mesh, clipped_per_example,
                   (replicated(params), P(DP), P(DP)), (gspec, P(DP)), clipped_per_example,
                   (params, x, y), outputs=("grads", "loss"))


# --------------------------------------------------------------------------
# 11. Data-parallel SGD whose gradient all-reduce names its device groups
#     explicitly (axis_index_groups: explicit replica_groups lists in the HLO).
# --------------------------------------------------------------------------

def make_dp_sgd_groups(mesh, bug=None, DP="dp"):
    n = mesh.shape[DP]

    def step(params, x, y):
        loss, g = jax.value_and_grad(mse)(params, x, y)
        with jax.named_scope("grad_sync"):
            if bug == "dp-pmean-subgroups":
                groups = [list(range(0, n // 2)), list(range(n // 2, n))]   # BUG(dp-pmean-subgroups)
            else:
                groups = [list(range(n))]
            g = jax.lax.pmean(g, DP, axis_index_groups=groups)  # BUG-SITE(dp-pmean-subgroups)
            loss = jax.lax.pmean(loss, DP)
        return sgd(params, g), loss

    params, x, y = mlp_data(11)
    in_specs = (replicated(params), P(DP), P(DP))
    out_specs = (replicated(params), P())
    return Program("mlp.dp_sgd_groups", mesh, step, in_specs, out_specs, sgd_baseline,
                   (params, x, y))


# --------------------------------------------------------------------------
# 12. Gradient accumulation with a python loop over the microbatches (no while
#     loop in the HLO), then pmean.
# --------------------------------------------------------------------------

def make_grad_accum_unrolled(mesh, bug=None, DP="dp"):
    def step(params, x, y):
        mb = x.shape[0] // MICRO
        gsum, lsum = None, 0.0
        for i in range(MICRO):
            with jax.named_scope(f"micro{i}"):
                loss, g = jax.value_and_grad(mse)(params, x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb])
            gsum = g if gsum is None else jax.tree.map(jnp.add, gsum, g)
            lsum = lsum + loss
        with jax.named_scope("accumulate"):
            if bug == "accum-unrolled-no-divide":
                g = gsum                                    # BUG(accum-unrolled-no-divide)
            else:
                g = jax.tree.map(lambda t: t / MICRO, gsum)
        return accum_sync(params, g, lsum, DP)

    return accum_program("mlp.grad_accum_unrolled", mesh, step, 12, DP)
